// The simulated links and LANs of nestbed-sim (see links.h).

#include "links.h"

#include "attach.h"

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

// The device let go of the packet it held.
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
    Released(m);
    ++m->egress.packetsOut;
    m->egress.bytesOut += p->GetSize();
}

// The device could not put its packet on the wire: a drop of the queue's.
void
NotSent(Member* m, Ptr<const Packet>)
{
    Released(m);
    ++m->egress.dropsQueue;
}

// A packet's bytes as linkd counts them: its Ethernet frame as a veth carries it, the IP
// packet and 14 bytes, whatever header the link adds.
uint32_t
FrameBytes(const Member& m, Ptr<const Packet> p)
{
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
    return *down;
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
    uint64_t* cause = *m.down                             ? &m.egress.dropsDown
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
        // The device holds it until it has sent it (SentOut) or given it up (NotSent), its
        // time on the wire and its gap from now (as the device computes them).
        member->onWire = m_frames.front();
        Time onWire = member->dataRate.CalculateBytesTxTime(p->GetSize()) + member->gap;
        member->wireUntil = Simulator::Now() + onWire;
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

namespace
{

// The frame the device holds counts until the instant it lets it go, not at that instant: a
// packet that arrives then (from a link of the same rate, whose end is at the same
// nanosecond) finds it gone, as in linkd's pipe.
uint32_t
OnWire(const Member& m)
{
    return Simulator::Now() < m.wireUntil ? m.onWire : 0;
}

} // namespace

uint64_t
SendQueue::HeldPackets(const Member& m) const
{
    return GetNPackets() + (OnWire(m) ? 1 : 0);
}

uint64_t
SendQueue::HeldBytes(const Member& m) const
{
    return m_frameBytes + OnWire(m);
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

TypeId
LanDevice::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::LanDevice")
                            .SetParent<PointToPointNetDevice>()
                            .SetGroupName("nestbed")
                            .AddConstructor<LanDevice>();
    return tid;
}

bool
LanDevice::Send(Ptr<Packet> packet, const Address& dest, uint16_t protocol)
{
    return SendFrom(packet, GetAddress(), dest, protocol);
}

bool
LanDevice::SendFrom(Ptr<Packet> packet,
                    const Address& source,
                    const Address& dest,
                    uint16_t protocol)
{
    EthernetHeader ethernet(false);
    ethernet.SetSource(Mac48Address::ConvertFrom(source));
    ethernet.SetDestination(Mac48Address::ConvertFrom(dest));
    ethernet.SetLengthType(protocol);
    packet->AddHeader(ethernet);
    return PointToPointNetDevice::Send(packet, dest, LAN_FRAME_PROTOCOL);
}

bool
LanDevice::SupportsSendFrom() const
{
    return true;
}

bool
LanDevice::NeedsArp() const
{
    return true;
}

bool
LanDevice::IsPointToPoint() const
{
    return false;
}

void
LanDevice::SetReceiveCallback(NetDevice::ReceiveCallback cb)
{
    m_up = cb;
    PointToPointNetDevice::SetReceiveCallback(MakeCallback(&LanDevice::FromWire, this));
}

void
LanDevice::SetPromiscReceiveCallback(NetDevice::PromiscReceiveCallback cb)
{
    m_promisc = cb; // called by FromWire, with the frame's own addresses
}

bool
LanDevice::FromWire(Ptr<NetDevice>, Ptr<const Packet> p, uint16_t, const Address&)
{
    CorruptTag corrupted;
    if (p->PeekPacketTag(corrupted))
    {
        return true; // the receiver's checksum would discard it
    }
    Ptr<Packet> packet = p->Copy();
    EthernetHeader ethernet(false);
    packet->RemoveHeader(ethernet);
    HandUp(this, packet, ethernet, m_promisc, m_up);
    return true;
}

void
JoinWire(Ptr<Node> node, Ptr<PointToPointNetDevice> device, Ptr<WireChannel> channel)
{
    // As PointToPointHelper::Install, with each device's own queue.
    node->AddDevice(device);
    Ptr<Queue<Packet>> packets = CreateObject<SendQueue>();
    device->SetQueue(packets);
    device->Attach(channel);
    Ptr<NetDeviceQueueInterface> flow = CreateObject<NetDeviceQueueInterface>();
    flow->GetTxQueue(0)->ConnectQueueTraces(packets);
    device->AggregateObject(flow);
}

SimLink::SimLink(std::string name, bool lanMember)
    : m_name(std::move(name)),
      m_lanMember(lanMember)
{
}

size_t
SimLink::Members() const
{
    return m_members.size();
}

const Member&
SimLink::At(size_t member) const
{
    return *m_members.at(member);
}

void
SimLink::Pace(size_t member)
{
    Member& m = *m_members[member];
    double bps = m.rateBps;
    Time gap = bps > 0 ? Seconds((WIRE_BYTES - m.header) * 8 / bps) : Seconds(0);
    m.gap = gap;
    auto device = DynamicCast<PointToPointNetDevice>(m.device);
    device->SetInterframeGap(gap);
    DynamicCast<WireChannel>(device->GetChannel())
        ->SetDirection(member, gap, Seconds(m.delayS), m.jitter, m.mangle);
}

void
SimLink::Add(const std::string& node, Ptr<PointToPointNetDevice> device, const Pipe& pipe)
{
    auto m = std::make_unique<Member>();
    m->node = node;
    m->header = m_lanMember ? 2 + 14 : 2; // PPP, and a LAN's Ethernet
    m->device = device;
    m->down = m_lanMember && !m_members.empty() ? &m_never : &m_down;
    if (!m_lanMember)
    {
        m->error = CreateObject<LinkLoss>();
        m->error->down = &m_down;
        device->SetAttribute("ReceiveErrorModel", PointerValue(m->error));
    }
    DynamicCast<WireChannel>(device->GetChannel())->CarryCorrupted(m_lanMember);
    m->queue = device->GetQueue();
    Member* raw = m.get();
    DynamicCast<SendQueue>(m->queue)->member = raw;
    m->queue->TraceConnectWithoutContext("Enqueue", MakeBoundCallback(&QueueIn, raw));
    device->TraceConnectWithoutContext("PhyTxEnd", MakeBoundCallback(&SentOut, raw));
    device->TraceConnectWithoutContext("PhyTxDrop", MakeBoundCallback(&NotSent, raw));
    device->TraceConnectWithoutContext("PhyRxEnd", MakeBoundCallback(&Arrived, raw));
    device->TraceConnectWithoutContext("PhyRxDrop", MakeBoundCallback(&Lost, raw));
    m_members.push_back(std::move(m));
    Set(m_members.size() - 1, pipe);
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
SimLink::Set(size_t member, const Pipe& pipe)
{
    Member& m = *m_members.at(member);
    m.sendLoss = pipe.loss;
    Limit(member, pipe.queue);
    m.dataRate = DataRate(Rate(pipe.rateBps));
    DynamicCast<PointToPointNetDevice>(m.device)->SetDataRate(m.dataRate);
    m.rateBps = pipe.rateBps;
    m.delayS = pipe.delayS;
    m.jitter = pipe.jitter;
    m.mangle = pipe.mangle;
    Pace(member);
}

void
SimLink::SetDown(bool down)
{
    m_down = down;
}

void
SimLink::PipeJson(std::ostringstream& s, size_t member, bool sent) const
{
    const Member& m = *m_members[member];
    auto wire = DynamicCast<WireChannel>(m.device->GetChannel());
    if (sent)
    {
        // As linkd counts them: duplicates go out beside their originals.
        Counters egress = m.egress;
        const Mangled& made = wire->Counts(member);
        egress.packetsOut += made.duplicates;
        egress.bytesOut += made.duplicateBytes;
        auto held = DynamicCast<SendQueue>(m.queue);
        Json(s, egress, held->HeldPackets(m), held->HeldBytes(m), made);
        return;
    }
    // A corrupted packet reaches its receiver, which discards it.
    Counters ingress = m.ingress;
    const Mangled& came = wire->Counts(1 - member);
    ingress.packetsIn += came.discarded;
    ingress.bytesIn += came.discardedBytes;
    ingress.packetsOut += came.discarded;
    ingress.bytesOut += came.discardedBytes;
    Json(s, ingress, 0, 0);
}

std::string
SimLink::CountersJson() const
{
    std::ostringstream s;
    s << "\"" << m_name << "\":{\"ports\":{";
    for (size_t i = 0; i < m_members.size(); ++i)
    {
        s << (i ? "," : "") << "\"" << m_members[i]->node << "\":{\"egress\":";
        PipeJson(s, i, true);
        s << ",\"ingress\":";
        PipeJson(s, i, false);
        s << "}";
    }
    s << "}}";
    return s.str();
}

SimLan::SimLan(std::string name)
    : m_name(std::move(name)),
      m_switch(CreateObject<Node>())
{
}

Ptr<LanDevice>
SimLan::Add(const std::string& node, Ptr<Node> at, const Pipe& egress, const Pipe& ingress)
{
    Ptr<WireChannel> channel = CreateObject<WireChannel>();
    Ptr<LanDevice> device = CreateObject<LanDevice>();
    device->SetAddress(Mac48Address::Allocate());
    JoinWire(at, device, channel);
    Ptr<PointToPointNetDevice> port = CreateObject<PointToPointNetDevice>();
    port->SetAddress(Mac48Address::Allocate());
    JoinWire(m_switch, port, channel);
    // What reaches the switch's node goes to the switch, not to the stack it does not have.
    port->SetReceiveCallback(MakeCallback(&SimLan::Forward, this));
    auto link = std::make_unique<SimLink>(m_name, true);
    link->Add(node, device, egress);
    link->Add("switch/" + node, port, ingress); // named apart: its RED draws its own
    m_where[Mac48Address::ConvertFrom(device->GetAddress())] = m_links.size();
    m_links.push_back(std::move(link));
    m_ports.push_back(port);
    return device;
}

size_t
SimLan::Members() const
{
    return m_links.size();
}

void
SimLan::Set(size_t member, const Pipe& egress, const Pipe& ingress)
{
    m_links.at(member)->Set(0, egress);
    m_links.at(member)->Set(1, ingress);
}

void
SimLan::SetDown(bool down)
{
    for (auto& link : m_links)
    {
        link->SetDown(down);
    }
}

bool
SimLan::Forward(Ptr<NetDevice> port, Ptr<const Packet> frame, uint16_t, const Address&)
{
    size_t from = 0;
    while (from < m_ports.size() && m_ports[from] != port)
    {
        ++from;
    }
    EthernetHeader ethernet(false);
    frame->PeekHeader(ethernet);
    Mac48Address to = ethernet.GetDestination();
    auto known = to.IsGroup() ? m_where.end() : m_where.find(to);
    for (size_t j = 0; j < m_ports.size(); ++j)
    {
        if (j != from && (known == m_where.end() || known->second == j))
        {
            m_ports[j]->Send(frame->Copy(), to, LAN_FRAME_PROTOCOL);
        }
    }
    return true;
}

std::string
SimLan::CountersJson() const
{
    std::ostringstream s;
    s << "\"" << m_name << "\":{\"ports\":{";
    for (size_t i = 0; i < m_links.size(); ++i)
    {
        // The member's egress pipe is its way to the switch; its ingress pipe, the switch's
        // port's way to it.
        s << (i ? "," : "") << "\"" << m_links[i]->At(0).node << "\":{\"egress\":";
        m_links[i]->PipeJson(s, 0, true);
        s << ",\"ingress\":";
        m_links[i]->PipeJson(s, 1, true);
        s << "}";
    }
    s << "}}";
    return s.str();
}

} // namespace nestbed
