// The channel of nestbed-sim's simulated point-to-point links, and of each LAN member's link
// to its LAN's switch: ns-3's, with each direction's packets delivered as linkd delivers
// them. A packet is on the wire for its Ethernet frame's bytes (the sending device's rate
// covers its own header; the rest is a gap the device leaves after it, see links.h's
// WIRE_BYTES), then this direction's delay and jitter: drawn as linkd draws it (netem's
// distributions, clipped to ±4 jitters), never before the packet is on the wire, and never
// before the packet ahead of it unless the direction reorders.

#pragma once

#include "ns3/core-module.h"
#include "ns3/point-to-point-module.h"

#include <array>
#include <cstdint>
#include <string>

namespace nestbed
{

struct Jitter
{
    double jitterS = 0;
    std::string distribution = "uniform"; // uniform, normal, pareto, paretonormal
    bool reorder = false;
};

// A jitter word: "0" (none) or "JITTER_S/DISTRIBUTION/REORDER" (REORDER 0 or 1).
Jitter ParseJitter(const std::string& word);

// What a direction does to a packet as it goes on the wire, as linkd's delay stage decides it
// when the packet reaches the head of its queue: a duplicate (taking neither queue space nor
// time on the wire, with its own jitter) with probability `duplicate`, and a flipped bit with
// probability `corrupt` (of the original, never the duplicate). ns-3's stack cannot carry a
// damaged packet, so a corrupted one goes no further, as the receiver's checksum would
// discard it.
struct Mangle
{
    double duplicate = 0;
    double corrupt = 0;
};

// A mangle word: "0" (neither) or "DUPLICATE/CORRUPT", each a probability.
Mangle ParseMangle(const std::string& word);

// What a direction's Mangle did: the copies it made, the packets it corrupted, and those of
// them that have reached the receiver (to be discarded there), with their bytes.
struct Mangled
{
    uint64_t duplicates = 0;
    uint64_t duplicateBytes = 0;
    uint64_t corrupted = 0;
    uint64_t discarded = 0;
    uint64_t discardedBytes = 0;
};

// Marks a corrupted packet that a LAN member's link carries on (to the switch, and out to the
// members it goes to), as linkd carries a corrupted frame to its receiver; the receiving
// member's device discards it, as the receiver's checksum would.
class CorruptTag : public ns3::Tag
{
  public:
    static ns3::TypeId GetTypeId();
    ns3::TypeId GetInstanceTypeId() const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(ns3::TagBuffer) const override;
    void Deserialize(ns3::TagBuffer) override;
    void Print(std::ostream& os) const override;
};

class WireChannel : public ns3::PointToPointChannel
{
  public:
    static ns3::TypeId GetTypeId();
    WireChannel();

    // Direction 0 carries what the first attached device sends.
    void SetDirection(size_t direction,
                      ns3::Time gap,
                      ns3::Time delay,
                      const Jitter& jitter,
                      const Mangle& mangle);
    const Mangled& Counts(size_t direction) const;
    // Whether a corrupted packet goes on, marked (a LAN member's link), rather than stopping
    // at the receiver.
    void CarryCorrupted(bool carry);

    bool TransmitStart(ns3::Ptr<const ns3::Packet> p,
                       ns3::Ptr<ns3::PointToPointNetDevice> src,
                       ns3::Time txTime) override;

  private:
    struct Direction
    {
        ns3::Time gap;
        ns3::Time delay;
        Jitter jitter;
        Mangle mangle;
        Mangled counts;
        ns3::Time lastDue;
    };

    double Draw(const Jitter& jitter);
    // Delivers P to DST at its due time after TRANSMITTED: D's delay and jitter, never
    // before it is on the wire nor (unless D reorders) before the packet ahead of it, less
    // what it waited between the kernel and the simulation (COUNTED among the waits given
    // up); to no one when DST is null (its due time still holds back the packets behind
    // it).
    void Deliver(Direction& d,
                 ns3::Ptr<const ns3::Packet> p,
                 ns3::Ptr<ns3::PointToPointNetDevice> dst,
                 ns3::Time transmitted,
                 bool counted);
    // A corrupted packet of BYTES reached the receiver.
    void Discarded(Direction* d, uint32_t bytes);

    std::array<Direction, 2> m_directions;
    bool m_carryCorrupted = false;
    ns3::Ptr<ns3::UniformRandomVariable> m_uniform;
    ns3::Ptr<ns3::NormalRandomVariable> m_normal;
};

} // namespace nestbed
