// The channel of nestbed-sim's simulated point-to-point links (see wire.h).

#include "wire.h"

#include "attach.h"

#include <algorithm>
#include <cmath>
#include <sstream>
#include <stdexcept>

using namespace ns3;

namespace nestbed
{

namespace
{

// linkd's clip of the table-based distributions, in jitters (netem's tables are i16 over
// NETEM_DIST_SCALE = 8192).
constexpr double CLIP = 4.0;

// Φ⁻¹, the standard normal quantile function, for p in (0, 1) (Acklam's rational
// approximation, as linkd's delay stage computes it).
double
InverseNormal(double p)
{
    static const double a[] = {-3.969683028665376e1,
                               2.209460984245205e2,
                               -2.759285104469687e2,
                               1.383577518672690e2,
                               -3.066479806614716e1,
                               2.506628277459239};
    static const double b[] = {-5.447609879822406e1,
                               1.615858368580409e2,
                               -1.556989798598866e2,
                               6.680131188771972e1,
                               -1.328068155288572e1};
    static const double c[] = {-7.784894002430293e-3,
                               -3.223964580411365e-1,
                               -2.400758277161838,
                               -2.549732539343734,
                               4.374664141464968,
                               2.938163982698783};
    static const double d[] = {7.784695709041462e-3,
                               3.224671290700398e-1,
                               2.445134137142996,
                               3.754408661907416};
    const double low = 0.02425;
    if (p < low || p > 1 - low)
    {
        double q = std::sqrt(-2 * std::log(p < low ? p : 1 - p));
        double x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
                   ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
        return p < low ? x : -x;
    }
    double q = p - 0.5;
    double r = q * q;
    return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
           (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
}

} // namespace

Jitter
ParseJitter(const std::string& word)
{
    Jitter jitter;
    std::string text = word;
    std::replace(text.begin(), text.end(), '/', ' ');
    std::istringstream fields(text);
    if (!(fields >> jitter.jitterS) || jitter.jitterS < 0)
    {
        throw std::invalid_argument("jitter " + word + " is not JITTER_S/DISTRIBUTION/REORDER");
    }
    if (jitter.jitterS == 0)
    {
        return jitter;
    }
    int reorder = 0;
    if (!(fields >> jitter.distribution >> reorder))
    {
        throw std::invalid_argument("jitter " + word + " is not JITTER_S/DISTRIBUTION/REORDER");
    }
    const auto& d = jitter.distribution;
    if (d != "uniform" && d != "normal" && d != "pareto" && d != "paretonormal")
    {
        throw std::invalid_argument("no jitter distribution " + d);
    }
    jitter.reorder = reorder != 0;
    return jitter;
}

Mangle
ParseMangle(const std::string& word)
{
    Mangle mangle;
    if (word == "0")
    {
        return mangle;
    }
    std::string text = word;
    std::replace(text.begin(), text.end(), '/', ' ');
    std::istringstream fields(text);
    std::string rest;
    if (!(fields >> mangle.duplicate >> mangle.corrupt) || fields >> rest ||
        !(mangle.duplicate >= 0 && mangle.duplicate <= 1 && mangle.corrupt >= 0 &&
          mangle.corrupt <= 1))
    {
        throw std::invalid_argument("mangle " + word + " is not DUPLICATE/CORRUPT");
    }
    return mangle;
}

TypeId
CorruptTag::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::CorruptTag")
                            .SetParent<Tag>()
                            .SetGroupName("nestbed")
                            .AddConstructor<CorruptTag>();
    return tid;
}

TypeId
CorruptTag::GetInstanceTypeId() const
{
    return GetTypeId();
}

uint32_t
CorruptTag::GetSerializedSize() const
{
    return 0;
}

void
CorruptTag::Serialize(TagBuffer) const
{
}

void
CorruptTag::Deserialize(TagBuffer)
{
}

void
CorruptTag::Print(std::ostream& os) const
{
    os << "corrupted";
}

TypeId
WireChannel::GetTypeId()
{
    static TypeId tid = TypeId("nestbed::WireChannel")
                            .SetParent<PointToPointChannel>()
                            .SetGroupName("nestbed")
                            .AddConstructor<WireChannel>();
    return tid;
}

WireChannel::WireChannel()
    : m_uniform(CreateObject<UniformRandomVariable>()),
      m_normal(CreateObject<NormalRandomVariable>())
{
}

void
WireChannel::SetDirection(size_t direction,
                          Time gap,
                          Time delay,
                          const Jitter& jitter,
                          const Mangle& mangle)
{
    m_directions.at(direction).gap = gap;
    m_directions.at(direction).delay = delay;
    m_directions.at(direction).jitter = jitter;
    m_directions.at(direction).mangle = mangle;
}

void
WireChannel::CarryCorrupted(bool carry)
{
    m_carryCorrupted = carry;
}

const Mangled&
WireChannel::Counts(size_t direction) const
{
    return m_directions.at(direction).counts;
}

void
WireChannel::Discarded(Direction* d, uint32_t bytes)
{
    ++d->counts.discarded;
    d->counts.discardedBytes += bytes;
}

double
WireChannel::Draw(const Jitter& jitter)
{
    if (jitter.jitterS == 0)
    {
        return 0;
    }
    if (jitter.distribution == "uniform")
    {
        return m_uniform->GetValue(-jitter.jitterS, jitter.jitterS);
    }
    double unit;
    if (jitter.distribution == "normal")
    {
        unit = m_normal->GetValue(0, 1);
    }
    else
    {
        // q in (0, 1): both quantile functions are finite.
        double q = m_uniform->GetValue(1e-12, 1 - 1e-12);
        double pareto = (std::pow(1 - q, -1.0 / 3) - 1.5) * 4 / 3; // shape 3, scale 1, mean 0
        unit = jitter.distribution == "pareto" ? pareto : 0.25 * InverseNormal(q) + 0.75 * pareto;
    }
    return std::clamp(unit, -CLIP, CLIP) * jitter.jitterS;
}

bool
WireChannel::TransmitStart(Ptr<const Packet> p, Ptr<PointToPointNetDevice> src, Time txTime)
{
    size_t wire = GetPointToPointDevice(0) == src ? 0 : 1;
    Ptr<PointToPointNetDevice> dst = GetPointToPointDevice(1 - wire);
    Direction& d = m_directions[wire];
    Time transmitted = Simulator::Now() + txTime + d.gap;
    // As linkd's delay stage: corruption, then duplication, are drawn at the head of the queue.
    bool corrupt = d.mangle.corrupt > 0 && m_uniform->GetValue() < d.mangle.corrupt;
    bool duplicate = d.mangle.duplicate > 0 && m_uniform->GetValue() < d.mangle.duplicate;
    d.counts.corrupted += corrupt ? 1 : 0;
    if (corrupt && m_carryCorrupted)
    {
        // Marked once: a frame corrupted on its way to the switch may be again on its way out
        // (ns-3 aborts on a second tag of a kind).
        CorruptTag tag;
        Ptr<Packet> marked = p->Copy();
        if (!marked->PeekPacketTag(tag))
        {
            marked->AddPacketTag(tag);
        }
        Deliver(d, marked, dst, transmitted, false);
    }
    else
    {
        Deliver(d, p, corrupt ? nullptr : dst, transmitted, !corrupt);
    }
    if (duplicate)
    {
        ++d.counts.duplicates;
        d.counts.duplicateBytes += p->GetSize();
        Deliver(d, p, dst, transmitted, false);
    }
    return true;
}

void
WireChannel::Deliver(Direction& d,
                     Ptr<const Packet> p,
                     Ptr<PointToPointNetDevice> dst,
                     Time transmitted,
                     bool counted)
{
    Time due = std::max(transmitted + d.delay + Seconds(Draw(d.jitter)), transmitted);
    // The earliest the packet may arrive: once it is on the wire, and not before the packet
    // ahead of it unless the direction reorders.
    Time earliest = d.jitter.reorder ? transmitted : std::max(transmitted, d.lastDue);
    due = std::max(due, earliest);
    // A frame that waited between the kernel and the simulation gives that wait up from
    // the delay (attach.h).
    Ptr<Packet> copy = p->Copy();
    due -= GiveUp(copy, due - earliest, counted);
    d.lastDue = std::max(d.lastDue, due);
    if (!dst)
    {
        // Corrupted: it held its place in the line, and reaches the receiver only to be
        // discarded (counted there, as linkd's receiving pipe passes it).
        Simulator::Schedule(due - Simulator::Now(), &WireChannel::Discarded, this, &d, p->GetSize());
        return;
    }
    uint32_t node = dst->GetNode()->GetId();
    Time wait = due - Simulator::Now();
    Simulator::ScheduleWithContext(node, wait, &PointToPointNetDevice::Receive, dst, copy);
    WakeFor(node, due);
}

} // namespace nestbed
