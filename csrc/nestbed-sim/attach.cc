// The attachments of nestbed-sim and the wait of their frames (see attach.h).

#include "attach.h"

#include <poll.h>
#include <sys/socket.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

using namespace ns3;

namespace nestbed
{

namespace
{

constexpr size_t kMaxPending = 1 << 16; // frames read and waiting for the simulator
constexpr unsigned kBatch = 64;         // frames a read takes at most
// The most time between two frames of a batch as they enter the simulation (about what the
// reader took for one frame when it read them one at a time).
constexpr int64_t kSpacingNs = 2000;
// How long before a frame leaves through an attachment the simulator busy-waits for it, if
// the description does not say (spin_s): docs/benchmarks.md measures it.
constexpr int64_t kDefaultSpinNs = 100000;

WaitStats g_waits;
int64_t g_spinNs = kDefaultSpinNs;
std::set<uint32_t> g_attached; // nodes with an attachment
// Batches handed to the simulator and not yet taken: a busy-wait gives way to them.
std::atomic<int> g_arriving{0};

int64_t
RealtimeClockNs()
{
    timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// The real-time clock (CLOCK_REALTIME, the kernel's receive times' clock) at the simulator's
// start, given the simulator's real time REAL just read: the clock read after it is late by
// however long the thread was held up between the two (a descheduled thread: milliseconds),
// so the least of all estimates is kept. Too late an origin would give up more of a frame's
// delay than it waited.
int64_t
RealtimeOriginNs(Time real)
{
    static int64_t origin = std::numeric_limits<int64_t>::max();
    origin = std::min(origin, RealtimeClockNs() - real.GetNanoSeconds());
    return origin;
}

Ptr<RealtimeSimulatorImpl>
Impl()
{
    static Ptr<RealtimeSimulatorImpl> impl =
        DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
    return impl;
}

// Reads every frame waiting on an attachment's socket at once, with the kernel's receive
// time of each, and hands them to the device. Runs in FdReader's thread.
class BatchReader : public FdReader
{
  public:
    BatchReader(AttachDevice* device, size_t frameBytes)
        : m_device(device),
          m_frameBytes(frameBytes),
          m_bytes(kBatch * frameBytes),
          m_control(kBatch * CMSG_SPACE(sizeof(timespec)))
    {
        for (unsigned i = 0; i < kBatch; ++i)
        {
            m_iov[i] = {m_bytes.data() + i * m_frameBytes, m_frameBytes};
        }
    }

  private:
    // FdReader's thread calls this once the socket is first readable; it then reads for good,
    // each call waiting for a frame and taking all that are there (a select before each
    // read, as FdReader's loop does, costs a tenth of nestbed-sim's CPU a frame through).
    // nestbed-sim ends without stopping its devices, so it never returns.
    Data DoRead() override
    {
        while (true)
        {
            ReadBatch();
        }
    }

    void ReadBatch()
    {
        const size_t cmsgBytes = CMSG_SPACE(sizeof(timespec));
        for (unsigned i = 0; i < kBatch; ++i)
        {
            m_messages[i] = {};
            m_messages[i].msg_hdr.msg_iov = &m_iov[i];
            m_messages[i].msg_hdr.msg_iovlen = 1;
            m_messages[i].msg_hdr.msg_control = m_control.data() + i * cmsgBytes;
            m_messages[i].msg_hdr.msg_controllen = cmsgBytes;
        }
        int n = recvmmsg(m_fd, m_messages.data(), kBatch, MSG_WAITFORONE, nullptr);
        if (n <= 0)
        {
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            {
                pollfd readable = {m_fd, POLLIN, 0}; // a socket opened non-blocking
                poll(&readable, 1, -1);
            }
            return; // interrupted: wait again
        }
        m_frames.clear();
        for (int i = 0; i < n; ++i)
        {
            msghdr& h = m_messages[i].msg_hdr;
            int64_t kernelNs = 0;
            for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
            {
                if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS)
                {
                    timespec ts;
                    std::memcpy(&ts, CMSG_DATA(c), sizeof(ts));
                    kernelNs = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
                }
            }
            size_t length = std::min<size_t>(m_messages[i].msg_len, m_frameBytes);
            m_frames.push_back({i * m_frameBytes, length, kernelNs});
        }
        m_device->Deliver(m_bytes.data(), m_frames);
    }

    AttachDevice* m_device;
    size_t m_frameBytes;
    std::vector<uint8_t> m_bytes;
    std::vector<uint8_t> m_control;
    std::array<iovec, kBatch> m_iov;
    std::array<mmsghdr, kBatch> m_messages;
    std::vector<AttachDevice::Frame> m_frames;
};

// Busy-waits until DUE on the real-time clock, or until a frame arrives (it is not kept
// waiting behind the busy-wait; the frame due then wakes as any event does).
void
SpinUntil(Time due)
{
    Ptr<RealtimeSimulatorImpl> impl = Impl();
    while (impl->RealtimeNow() < due && g_arriving.load(std::memory_order_relaxed) == 0)
    {
    }
}

} // namespace

TypeId
WaitTag::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::WaitTag")
                            .SetParent<Tag>()
                            .SetGroupName("nestbed")
                            .AddConstructor<WaitTag>();
    return tid;
}

TypeId
WaitTag::GetInstanceTypeId() const
{
    return GetTypeId();
}

uint32_t
WaitTag::GetSerializedSize() const
{
    return 8;
}

void
WaitTag::Serialize(TagBuffer i) const
{
    i.WriteU64(waitNs);
}

void
WaitTag::Deserialize(TagBuffer i)
{
    waitNs = i.ReadU64();
}

void
WaitTag::Print(std::ostream& os) const
{
    os << "wait=" << waitNs << "ns";
}

void
Spread::Add(int64_t ns)
{
    m_minNs = m_count ? std::min(m_minNs, ns) : ns;
    m_maxNs = m_count ? std::max(m_maxNs, ns) : ns;
    ++m_count;
    m_sumNs += ns;
    ++m_us[std::clamp<int64_t>(ns / 1000, 0, kBuckets)];
}

std::string
Spread::Json() const
{
    auto quantile = [this](double q) -> int64_t {
        uint64_t rank = static_cast<uint64_t>(q * (m_count - 1));
        uint64_t seen = 0;
        for (size_t us = 0; us < kBuckets; ++us)
        {
            seen += m_us[us];
            if (seen > rank)
            {
                return static_cast<int64_t>(us) * 1000;
            }
        }
        return m_maxNs;
    };
    std::ostringstream out;
    out << "{\"count\":" << m_count;
    if (m_count)
    {
        out << ",\"sum_ns\":" << m_sumNs << ",\"mean_ns\":" << m_sumNs / static_cast<int64_t>(m_count)
            << ",\"p50_ns\":" << quantile(0.5) << ",\"p99_ns\":" << quantile(0.99)
            << ",\"min_ns\":" << m_minNs << ",\"max_ns\":" << m_maxNs;
    }
    out << "}";
    return out.str();
}

WaitStats&
Waits()
{
    return g_waits;
}

std::string
WaitsJson()
{
    const WaitStats& w = g_waits;
    return "\"waits\":{\"wait\":" + w.wait.Json() + ",\"late\":" + w.late.Json() +
           ",\"out_late\":" + w.outLate.Json() +
           ",\"given_up_ns\":" + std::to_string(w.givenUpNs) +
           ",\"kept_ns\":" + std::to_string(w.keptNs) +
           ",\"dropped\":" + std::to_string(w.dropped.load()) +
           ",\"unstamped\":" + std::to_string(w.unstamped) + "}";
}

Time
GiveUp(Ptr<Packet> p, Time available, bool counted)
{
    WaitTag tag;
    if (available <= Time(0) || !p->PeekPacketTag(tag))
    {
        return Time(0);
    }
    uint64_t given = std::min<uint64_t>(tag.waitNs, available.GetNanoSeconds());
    p->RemovePacketTag(tag);
    tag.waitNs -= given;
    if (tag.waitNs > 0)
    {
        p->AddPacketTag(tag);
    }
    g_waits.givenUpNs += counted ? given : 0;
    return NanoSeconds(given);
}

void
SetSpin(Time spin)
{
    g_spinNs = spin.GetNanoSeconds();
}

void
WakeFor(uint32_t nodeId, Time due)
{
    Time early = due - NanoSeconds(g_spinNs) - Simulator::Now();
    if (g_spinNs > 0 && early > Time(0) && g_attached.count(nodeId))
    {
        Simulator::Schedule(early, &SpinUntil, due);
    }
}

TypeId
AttachDevice::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::AttachDevice")
                            .SetParent<FdNetDevice>()
                            .SetGroupName("nestbed")
                            .AddConstructor<AttachDevice>();
    return tid;
}

void
AttachDevice::SetNode(Ptr<Node> node)
{
    FdNetDevice::SetNode(node);
    m_nodeId = node->GetId();
    g_attached.insert(m_nodeId);
}

void
AttachDevice::SetReceiveCallback(NetDevice::ReceiveCallback cb)
{
    FdNetDevice::SetReceiveCallback(cb);
    m_rx = cb;
}

void
AttachDevice::SetPromiscReceiveCallback(PromiscReceiveCallback cb)
{
    FdNetDevice::SetPromiscReceiveCallback(cb);
    m_promiscRx = cb;
}

Ptr<FdReader>
AttachDevice::DoCreateFdReader()
{
    int on = 1;
    setsockopt(GetFileDescriptor(), SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on));
    // As FdNetDevice: an Ethernet header, and 8 bytes of LLC/SNAP that DIX frames lack.
    return Create<BatchReader>(this, GetMtu() + 22);
}

void
AttachDevice::Deliver(const uint8_t* bytes, const std::vector<Frame>& frames)
{
    bool schedule = false;
    {
        std::lock_guard<std::mutex> guard(m_lock);
        for (const Frame& f : frames)
        {
            if (m_pending.frames.size() >= kMaxPending)
            {
                ++g_waits.dropped;
                continue;
            }
            size_t offset = m_pending.bytes.size();
            m_pending.bytes.insert(m_pending.bytes.end(),
                                   bytes + f.offset,
                                   bytes + f.offset + f.length);
            m_pending.frames.push_back({offset, f.length, f.kernelNs});
        }
        if (!m_scheduled && !m_pending.frames.empty())
        {
            m_scheduled = schedule = true;
        }
    }
    if (schedule)
    {
        g_arriving.fetch_add(1, std::memory_order_relaxed);
        Simulator::ScheduleWithContext(m_nodeId, Time(0), MakeEvent(&AttachDevice::Drain, this));
    }
}

void
AttachDevice::Drain()
{
    {
        std::lock_guard<std::mutex> guard(m_lock);
        std::swap(m_pending, m_work);
        m_scheduled = false;
    }
    g_arriving.fetch_sub(1, std::memory_order_relaxed);
    Time now = Simulator::Now();
    Time real = Impl()->RealtimeNow();
    int64_t originNs = RealtimeOriginNs(real);
    g_waits.late.Add((real - now).GetNanoSeconds());
    for (const Frame& f : m_work.frames)
    {
        Ptr<Packet> frame = Create<Packet>(m_work.bytes.data() + f.offset, f.length);
        Time received = f.kernelNs ? NanoSeconds(f.kernelNs - originNs) : now;
        g_waits.unstamped += f.kernelNs ? 0 : 1;
        // Frames enter in the order they came, each at its kernel time if the simulation
        // is not past it yet, else now; frames that came together (a batch, read while the
        // simulator was busy) a little apart, as read one at a time they were, so that a
        // queue they meet is not handed them all at one instant.
        Time gap = std::min(received - m_lastReceived, NanoSeconds(kSpacingNs));
        Time entry = std::max({received, now, m_lastEntry + std::max(gap, Time(0))});
        m_lastReceived = received;
        m_lastEntry = entry;
        int64_t waitNs = (entry - received).GetNanoSeconds();
        g_waits.wait.Add(waitNs);
        if (entry == now)
        {
            Up(frame, waitNs);
        }
        else
        {
            Simulator::Schedule(entry - now, &AttachDevice::Up, this, frame, waitNs);
        }
    }
    m_work.bytes.clear();
    m_work.frames.clear();
}

// As FdNetDevice's ForwardUp, for DIX frames (the attachments' encapsulation).
void
AttachDevice::Up(Ptr<Packet> packet, int64_t waitNs)
{
    EthernetHeader header(false);
    if (packet->GetSize() < header.GetSerializedSize())
    {
        return;
    }
    packet->RemoveHeader(header);
    if (waitNs > 0)
    {
        WaitTag tag;
        tag.waitNs = static_cast<uint64_t>(waitNs);
        packet->AddPacketTag(tag);
    }
    HandUp(this, packet, header, m_promiscRx, m_rx);
}

void
HandUp(Ptr<NetDevice> device,
       Ptr<Packet> packet,
       const EthernetHeader& header,
       const NetDevice::PromiscReceiveCallback& promisc,
       const NetDevice::ReceiveCallback& rx)
{
    Mac48Address to = header.GetDestination();
    NetDevice::PacketType type = NetDevice::PACKET_OTHERHOST;
    if (to.IsBroadcast())
    {
        type = NetDevice::PACKET_BROADCAST;
    }
    else if (to.IsGroup())
    {
        type = NetDevice::PACKET_MULTICAST;
    }
    else if (to == Mac48Address::ConvertFrom(device->GetAddress()))
    {
        type = NetDevice::PACKET_HOST;
    }
    uint16_t protocol = header.GetLengthType();
    if (!promisc.IsNull())
    {
        promisc(device, packet, protocol, header.GetSource(), to, type);
    }
    if (type != NetDevice::PACKET_OTHERHOST && !rx.IsNull())
    {
        rx(device, packet, protocol, header.GetSource());
    }
}

bool
AttachDevice::SendFrom(Ptr<Packet> packet,
                       const Address& source,
                       const Address& dest,
                       uint16_t protocolNumber)
{
    WaitTag tag;
    if (packet->PeekPacketTag(tag))
    {
        g_waits.keptNs += tag.waitNs;
    }
    g_waits.outLate.Add((Impl()->RealtimeNow() - Simulator::Now()).GetNanoSeconds());
    return FdNetDevice::SendFrom(packet, source, dest, protocolNumber);
}

} // namespace nestbed
