// The simulated links and LANs of nestbed-sim (see links.h).

#include "links.h"

#include "ns3/csma-module.h"
#include "ns3/internet-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <sstream>
#include <stdexcept>

using namespace ns3;

namespace nestbed
{

namespace
{

void
QueueIn(Member* m, Ptr<const Packet> p)
{
    ++m->egress.packetsIn;
    m->egress.bytesIn += p->GetSize();
}

// The device let go of the packet it held: sent, or (a LAN's, after too many backoffs)
// dropped.
void
Released(Member* m)
{
    m->onWire = 0;
    if (m->queue->GetNPackets() == 0) // the device takes its next packet after this
    {
        m->idle = true;
        m->idleSince = Simulator::Now();
    }
}

void
SentOut(Member* m, Ptr<const Packet> p)
{
    // A point-to-point device ends its packet after the gap it leaves; a LAN's before it, so
    // its queue counts the packet until then, as linkd's counts the frame's whole time on the
    // wire. Scheduled now, this runs before the device takes its next packet.
    if (m->lan)
    {
        Simulator::Schedule(m->gap, &Released, m);
    }
    else
    {
        Released(m);
    }
    ++m->egress.packetsOut;
    m->egress.bytesOut += p->GetSize();
}

// A LAN's device gave up its packet after too many backoffs from a busy channel: its queue
// could not get it out, a drop of the queue's.
void
NotSent(Member* m, Ptr<const Packet>)
{
    Released(m);
    ++m->egress.dropsQueue;
}

// A packet's bytes as linkd counts them: its Ethernet frame as a veth carries it, the IP
// packet and 14 bytes, whatever header the link adds. A LAN's device has also padded a short
// frame to Ethernet's least, which a veth's frame is not.
uint32_t
FrameBytes(const Member& m, Ptr<const Packet> p)
{
    // Only a frame at Ethernet's least (64 bytes with its header and FCS) may be padded: the
    // others are counted without reading their headers, on every packet's path.
    constexpr uint32_t kLeastFrame = 64;
    if (m.lan && p->GetSize() <= kLeastFrame)
    {
        Ptr<Packet> frame = p->Copy();
        EthernetHeader ethernet(false);
        frame->RemoveHeader(ethernet);
        if (ethernet.GetLengthType() == Ipv4L3Protocol::PROT_NUMBER)
        {
            Ipv4Header ip;
            frame->PeekHeader(ip);
            return ip.GetSerializedSize() + ip.GetPayloadSize() + 14;
        }
        if (ethernet.GetLengthType() == ArpL3Protocol::PROT_NUMBER)
        {
            return 28 + 14; // an ARP packet of IPv4 over Ethernet
        }
    }
    return p->GetSize() - m.header + 14;
}

void
Arrived(Member* m, Ptr<const Packet> p)
{
    ++m->ingress.packetsIn;
    m->ingress.bytesIn += p->GetSize();
    ++m->ingress.packetsOut;
    m->ingress.bytesOut += p->GetSize();
}

void
Lost(Member* m, Ptr<const Packet> p)
{
    ++m->ingress.packetsIn;
    m->ingress.bytesIn += p->GetSize();
    ++(*m->down ? m->ingress.dropsDown : m->ingress.dropsLoss);
}

void
Json(std::ostringstream& s,
     const Counters& c,
     uint64_t queuePackets,
     uint64_t queueBytes,
     const Mangled& mangled = {})
{
    s << "{\"counters\":{\"packets_in\":" << c.packetsIn << ",\"bytes_in\":" << c.bytesIn
      << ",\"packets_out\":" << c.packetsOut << ",\"bytes_out\":" << c.bytesOut
      << ",\"queue_packets\":" << queuePackets << ",\"queue_bytes\":" << queueBytes
      << ",\"duplicates\":" << mangled.duplicates << ",\"corrupted\":" << mangled.corrupted
      << ",\"drops\":{\"loss\":" << c.dropsLoss << ",\"queue_full\":" << c.dropsQueue
      << ",\"red_early\":" << c.dropsRedEarly << ",\"red_forced\":" << c.dropsRedForced
      << ",\"ordinal\":" << c.dropsOrdinal
      << ",\"down\":" << c.dropsDown << "}}}";
}

} // namespace

namespace
{

// A whole word as an unsigned number of at most MAX (no sign, blanks or trailing text).
bool
WholeUnsigned(const std::string& word, uint64_t max, uint64_t& value)
{
    if (word.empty() || word.find_first_not_of("0123456789") != std::string::npos)
    {
        return false;
    }
    try
    {
        value = std::stoull(word);
    }
    catch (const std::exception&)
    {
        return false;
    }
    return value <= max;
}

// A whole word as a finite number.
bool
WholeFinite(const std::string& word, double& value)
{
    size_t used = 0;
    try
    {
        value = std::stod(word, &used);
    }
    catch (const std::exception&)
    {
        return false;
    }
    return !word.empty() && used == word.size() && std::isfinite(value) &&
           word.find_first_of(" \t") == std::string::npos;
}

} // namespace

QueueLimit
ParseQueueLimit(const std::string& text)
{
    std::vector<std::string> parts;
    size_t from = 0;
    for (size_t slash = text.find('/'); slash != std::string::npos; slash = text.find('/', from))
    {
        parts.push_back(text.substr(from, slash - from));
        from = slash + 1;
    }
    parts.push_back(text.substr(from));
    const std::string& word = parts[0];
    QueueLimit limit;
    limit.bytes = !word.empty() && word.back() == 'B';
    uint64_t value = 0;
    if (!WholeUnsigned(limit.bytes ? word.substr(0, word.size() - 1) : word, UINT32_MAX, value) ||
        value < 1)
    {
        throw std::invalid_argument("a queue limit is N (packets) or NB (bytes), at least 1: " +
                                    word);
    }
    limit.value = static_cast<uint32_t>(value);
    if (parts.size() == 1)
    {
        return limit;
    }
    // THRESH/MAXTHRESH/Q_WEIGHT/LINTERM/MEAN_PKTSIZE/IN_BYTES: RED's average is in bytes
    // when the queue's unit is, whether or not the file gave a limit (as in linkd).
    std::array<double, 4> numbers{};
    uint64_t mean = 0;
    uint64_t inBytes = 0;
    bool good = parts.size() == 8 && (parts[1] == "red" || parts[1] == "gred") &&
                WholeUnsigned(parts[6], UINT32_MAX, mean) && WholeUnsigned(parts[7], 1, inBytes);
    for (size_t i = 0; good && i < numbers.size(); ++i)
    {
        good = WholeFinite(parts[2 + i], numbers[i]);
    }
    limit.params = NbRedParams{numbers[0],
                               numbers[1],
                               numbers[2],
                               numbers[3],
                               static_cast<uint32_t>(mean),
                               parts[1] == "gred",
                               inBytes == 1};
    if (!good || !nb_red_valid(&limit.params))
    {
        throw std::invalid_argument("a RED queue is N[B]/red|gred/THRESH/MAXTHRESH/Q_WEIGHT/"
                                    "LINTERM/MEAN_PKTSIZE/IN_BYTES with parameters linkd "
                                    "takes: " + text);
    }
    limit.red = true;
    return limit;
}

Loss
ParseLoss(const std::string& word)
{
    Loss loss;
    std::string text = word.substr(0, word.find('@'));
    if (word.find('@') != std::string::npos)
    {
        std::string list = word.substr(word.find('@') + 1);
        std::replace(list.begin(), list.end(), ',', ' ');
        std::istringstream numbers(list);
        uint64_t n;
        while (numbers >> n)
        {
            loss.ordinals.insert(n);
        }
        if (!numbers.eof() || loss.ordinals.count(0))
        {
            throw std::invalid_argument("ordinals in " + word + " are not numbers from 1");
        }
    }
    if (text.rfind("ge/", 0) == 0)
    {
        for (char& c : text)
        {
            c = c == '/' ? ' ' : c;
        }
        std::istringstream fields(text.substr(3));
        loss.gilbert = true;
        if (!(fields >> loss.p >> loss.r >> loss.lossBad >> loss.lossGood))
        {
            throw std::invalid_argument("Gilbert-Elliott loss " + word + " is not ge/P/R/BAD/GOOD");
        }
    }
    else
    {
        std::istringstream fields(text);
        if (!(fields >> loss.rate))
        {
            throw std::invalid_argument("loss " + word + " is not a probability");
        }
    }
    for (double v : {loss.rate, loss.p, loss.r, loss.lossBad, loss.lossGood})
    {
        if (!(v >= 0 && v <= 1))
        {
            throw std::invalid_argument("loss " + word + " has a probability outside [0, 1]");
        }
    }
    return loss;
}

LossDraw::LossDraw()
    : m_random(CreateObject<UniformRandomVariable>())
{
}

bool
LossDraw::Lost(const Loss& loss)
{
    if (!loss.gilbert)
    {
        // No random draw per packet when nothing is lost.
        return loss.rate > 0 && m_random->GetValue() < loss.rate;
    }
    double lost = m_bad ? loss.lossBad : loss.lossGood;
    double leave = m_bad ? loss.r : loss.p;
    bool dropped = m_random->GetValue() < lost;
    if (m_random->GetValue() < leave)
    {
        m_bad = !m_bad;
    }
    return dropped;
}

TypeId
LinkLoss::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::LinkLoss")
                            .SetParent<ErrorModel>()
                            .SetGroupName("nestbed")
                            .AddConstructor<LinkLoss>();
    return tid;
}

bool
LinkLoss::DoCorrupt(Ptr<Packet>)
{
    return *down || m_draw.Lost(loss);
}

void
LinkLoss::DoReset()
{
}

TypeId
SendQueue::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::SendQueue")
                            .SetParent<DropTailQueue<Packet>>()
                            .SetGroupName("nestbed")
                            .AddConstructor<SendQueue>();
    return tid;
}

bool
SendQueue::Enqueue(Ptr<Packet> p)
{
    ++m_ordinal;
    Member& m = *member;
    bool lost = m_draw.Lost(m.sendLoss);
    // A LAN's down acts where each member receives (LinkLoss).
    uint64_t* cause = *m.down && !m.lan                   ? &m.egress.dropsDown
                      : m.sendLoss.ordinals.count(m_ordinal) ? &m.egress.dropsOrdinal
                      : lost                              ? &m.egress.dropsLoss
                                                          : nullptr;
    // Counted here, not through DropBeforeEnqueue: that would stop the device's transmit
    // queue (ns-3's flow control), and with nothing queued to dequeue nothing would wake it.
    uint32_t frame = FrameBytes(m, p);
    cause = cause ? cause : Decide(m, frame);
    if (!cause)
    {
        bool queued = DropTailQueue<Packet>::Enqueue(p); // ns-3's limit is above any (Limit)
        if (queued)
        {
            m.idle = false;
            m_frames.push_back(frame);
            m_frameBytes += frame;
        }
        return queued;
    }
    ++m.egress.packetsIn;
    m.egress.bytesIn += p->GetSize();
    ++*cause;
    return false;
}

Ptr<Packet>
SendQueue::Dequeue()
{
    Ptr<Packet> p = DropTailQueue<Packet>::Dequeue();
    if (p)
    {
        // The device holds it until it has sent it (SentOut) or given it up (NotSent).
        member->onWire = m_frames.front();
        m_frameBytes -= m_frames.front();
        m_frames.pop_front();
    }
    return p;
}

Ptr<Packet>
SendQueue::Remove()
{
    Ptr<Packet> p = DropTailQueue<Packet>::Remove();
    if (p)
    {
        m_frameBytes -= m_frames.front();
        m_frames.pop_front();
    }
    return p;
}

SendQueue::~SendQueue()
{
    nb_red_free(red);
}

uint64_t
SendQueue::HeldPackets(const Member& m) const
{
    return GetNPackets() + (m.onWire ? 1 : 0);
}

uint64_t
SendQueue::HeldBytes(const Member& m) const
{
    return m_frameBytes + m.onWire;
}

bool
SendQueue::Admits(const Member& m, uint32_t frame) const
{
    if (limitBytes == 0)
    {
        return HeldPackets(m) + 1 <= limitPackets;
    }
    return HeldBytes(m) + frame <= limitBytes;
}

uint64_t*
SendQueue::Decide(Member& m, uint32_t frame)
{
    // As linkd's pipe: RED decides first, on what the queue holds; the hard limit wins and
    // restarts RED's count.
    uint8_t verdict = 0;
    if (red)
    {
        bool empty = HeldPackets(m) == 0;
        int64_t idleNs = empty && m.idle ? (Simulator::Now() - m.idleSince).GetNanoSeconds() : -1;
        verdict = nb_red_arrival(red,
                                 HeldPackets(m),
                                 HeldBytes(m),
                                 idleNs,
                                 frame,
                                 static_cast<uint64_t>(m.rateBps));
    }
    if (!Admits(m, frame))
    {
        if (red)
        {
            nb_red_reset_count(red);
        }
        return &m.egress.dropsQueue;
    }
    return verdict == 1 ? &m.egress.dropsRedEarly
           : verdict == 2 ? &m.egress.dropsRedForced
                          : nullptr;
}

std::string
Rate(double bps)
{
    std::ostringstream out;
    out << static_cast<uint64_t>(bps > 0 ? bps : 100e9) << "bps";
    return out.str();
}

SimLink::SimLink(std::string name, bool lan)
    : m_name(std::move(name)),
      m_lan(lan)
{
}

bool
SimLink::Lan() const
{
    return m_lan;
}

void
LanDevice::AddLinkChangeCallback(Callback<void>)
{
}

size_t
SimLink::Members() const
{
    return m_members.size();
}

void
SimLink::Pace(size_t member, double bps)
{
    Member& m = *m_members[member];
    m.rateBps = bps;
    Time gap = bps > 0 ? Seconds((WIRE_BYTES - m.header) * 8 / bps) : Seconds(0);
    m.gap = gap;
    if (auto p2p = DynamicCast<PointToPointNetDevice>(m.device))
    {
        p2p->SetInterframeGap(gap);
        DynamicCast<WireChannel>(p2p->GetChannel())->SetDirection(member, gap, m.jitter, m.mangle);
    }
    else
    {
        DynamicCast<CsmaNetDevice>(m.device)->SetInterframeGap(gap);
    }
}

void
SimLink::Add(const std::string& node,
             Ptr<NetDevice> device,
             double rateBps,
             const Loss& loss,
             const Jitter& jitter,
             const Mangle& mangle)
{
    auto m = std::make_unique<Member>();
    m->node = node;
    m->lan = m_lan;
    m->device = device;
    m->down = &m_down;
    m->error = CreateObject<LinkLoss>();
    m->error->down = &m_down;
    (m_lan ? m->error->loss : m->sendLoss) = loss;
    m->jitter = jitter;
    m->mangle = mangle;
    device->SetAttribute("ReceiveErrorModel", PointerValue(m->error));
    if (auto p2p = DynamicCast<PointToPointNetDevice>(device))
    {
        m->queue = p2p->GetQueue();
        m->header = 2; // PPP
    }
    else
    {
        m->queue = DynamicCast<CsmaNetDevice>(device)->GetQueue();
        m->header = 18; // Ethernet header and FCS
    }
    Member* raw = m.get();
    if (auto sending = DynamicCast<SendQueue>(m->queue))
    {
        sending->member = raw;
    }
    m->queue->TraceConnectWithoutContext("Enqueue", MakeBoundCallback(&QueueIn, raw));
    device->TraceConnectWithoutContext("PhyTxEnd", MakeBoundCallback(&SentOut, raw));
    device->TraceConnectWithoutContext("PhyTxDrop", MakeBoundCallback(&NotSent, raw));
    device->TraceConnectWithoutContext("PhyRxEnd", MakeBoundCallback(&Arrived, raw));
    device->TraceConnectWithoutContext("PhyRxDrop", MakeBoundCallback(&Lost, raw));
    m_members.push_back(std::move(m));
    Pace(m_members.size() - 1, rateBps);
}

void
SimLink::Limit(size_t member, const QueueLimit& limit)
{
    Member& m = *m_members[member];
    auto sending = DynamicCast<SendQueue>(m.queue);
    if (!limit.red)
    {
        nb_red_free(sending->red);
        sending->red = nullptr;
    }
    else if (sending->red)
    {
        nb_red_set(sending->red, &limit.params); // checked when its word was read
    }
    else
    {
        uint64_t seed = std::hash<std::string>{}(m_name + "/" + m.node);
        sending->red = nb_red_new(&limit.params, seed);
        if (!sending->red)
        {
            throw std::invalid_argument("RED parameters of " + m_name + " that linkd refuses");
        }
    }
    // The queue admits by its own limits (Admits), so ns-3's never binds: its flow control
    // never stops the device, and lowering the limit below what is queued (which ns-3 refuses
    // by aborting) lets what is queued drain, as linkd does.
    sending->limitBytes = limit.bytes ? limit.value : 0;
    sending->limitPackets = limit.bytes ? 0 : limit.value;
    m.queue->SetMaxSize(QueueSize(std::to_string(UINT32_MAX) + "p"));
}

void
SimLink::SendLoss(size_t member, const Loss& loss)
{
    m_members[member]->sendLoss = loss;
}

void
SimLink::Set(const std::vector<double>& rates,
             double delayS,
             const std::vector<QueueLimit>& queues,
             const std::vector<Loss>& losses,
             const std::vector<Jitter>& jitters,
             const std::vector<Mangle>& mangles)
{
    size_t n = m_members.size();
    if (queues.size() != n || (!m_lan && (rates.size() != n || losses.size() != n)))
    {
        throw std::invalid_argument("a rate, a queue limit and a loss for each end of " + m_name);
    }
    for (size_t i = 0; i < n; ++i)
    {
        Member& m = *m_members[i];
        (m_lan ? m.error->loss : m.sendLoss) = losses[m_lan ? 0 : i];
        Limit(i, queues[i]);
        if (!m_lan)
        {
            DynamicCast<PointToPointNetDevice>(m.device)->SetDataRate(DataRate(Rate(rates[i])));
            m.jitter = i < jitters.size() ? jitters[i] : Jitter{};
            m.mangle = i < mangles.size() ? mangles[i] : Mangle{};
        }
        Pace(i, rates[m_lan ? 0 : i]);
    }
    Ptr<Channel> channel = m_members[0]->device->GetChannel();
    channel->SetAttribute("Delay", TimeValue(Seconds(delayS)));
    auto csma = DynamicCast<CsmaChannel>(channel);
    if (csma && csma->GetDataRate() != DataRate(Rate(rates[0])))
    {
        // A CSMA device reads its channel's rate only when it is attached: attached anew,
        // it sends at the new rate (what it is sending finishes at the old one). The channel
        // keeps a record of each attachment, the old ones inactive: a LAN's rate changes by
        // events, seldom.
        csma->SetAttribute("DataRate", DataRateValue(DataRate(Rate(rates[0]))));
        for (size_t i = 0; i < n; ++i)
        {
            auto device = DynamicCast<CsmaNetDevice>(m_members[i]->device);
            csma->Detach(device);
            device->Attach(csma);
            Pace(i, rates[0]); // after Attach, which sets a gap of its own
        }
    }
}

void
SimLink::SetDown(bool down)
{
    m_down = down;
}

std::string
SimLink::CountersJson() const
{
    std::ostringstream s;
    s << "\"" << m_name << "\":{\"ports\":{";
    for (size_t i = 0; i < m_members.size(); ++i)
    {
        const Member& m = *m_members[i];
        Counters egress = m.egress;
        Counters ingress = m.ingress;
        Mangled sent;
        if (auto wire = DynamicCast<WireChannel>(m.device->GetChannel()))
        {
            // As linkd counts them: duplicates go out beside their originals, and a corrupted
            // packet reaches its receiver, which discards it.
            sent = wire->Counts(i);
            egress.packetsOut += sent.duplicates;
            egress.bytesOut += sent.duplicateBytes;
            const Mangled& came = wire->Counts(1 - i);
            ingress.packetsIn += came.discarded;
            ingress.bytesIn += came.discardedBytes;
            ingress.packetsOut += came.discarded;
            ingress.bytesOut += came.discardedBytes;
        }
        s << (i ? "," : "") << "\"" << m.node << "\":{\"egress\":";
        Json(s, egress, m.queue->GetNPackets(), m.queue->GetNBytes(), sent);
        s << ",\"ingress\":";
        Json(s, ingress, 0, 0);
        s << "}";
    }
    s << "}}";
    return s.str();
}

} // namespace nestbed
