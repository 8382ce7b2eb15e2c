// The simulated links and LANs of nestbed-sim, as events change them and as their counters
// see them.
//
// Every direction of a point-to-point link is a pipe as linkd's: the sending member's queue
// decides the loss of what it sends as each packet arrives, before the queue and the rate
// (Bernoulli or Gilbert-Elliott, and drops by ordinal), then the rate, then the delay with its
// jitter, duplication and corruption (wire.h). A LAN is built as linkd builds an emulated one:
// each member is joined to the LAN's switch by a link of its own, whose way in carries the
// member's egress pipe and whose way out its ingress pipe, and the switch forwards each frame
// by its Ethernet destination (SimLan). `down` drops everything, as linkd's blackhole does, and
// `up` gives back the link's loss. The counters of each member mirror linkd's pipes: "egress"
// is what the member's device sends (into its queue, or dropped, and out on the wire),
// "ingress" what reaches it (on a LAN, what the switch's port toward it took in and sent).
// Bytes are as the link carries them: the IP packet and the link's own header (a LAN's, its
// Ethernet header in a 2-byte PPP frame); what a queue holds is counted as linkd counts it
// (the packet on the wire among them, each as its Ethernet frame).
//
// Every member's queue (SendQueue) admits by its own limit and counts what it turns away, so
// ns-3's flow control never stops a device.

#pragma once

#include "ns3/core-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/error-model.h"
#include "ns3/network-module.h"
#include "red.h"
#include "wire.h"

#include <cstdint>
#include <deque>
#include <sstream>
#include <map>
#include <set>
#include <memory>
#include <string>
#include <vector>

namespace nestbed
{

struct Counters
{
    uint64_t packetsIn = 0;
    uint64_t bytesIn = 0;
    uint64_t packetsOut = 0;
    uint64_t bytesOut = 0;
    uint64_t dropsLoss = 0;
    uint64_t dropsOrdinal = 0;
    uint64_t dropsQueue = 0;
    uint64_t dropsRedEarly = 0;
    uint64_t dropsRedForced = 0;
    uint64_t dropsDown = 0;
};

// A direction's random loss, as linkd's loss stage decides it: Bernoulli with probability
// `rate`, or a Gilbert-Elliott chain (p = P(good→bad), r = P(bad→good), the loss probability
// in each state) that decides a packet's loss in its state, then moves.
struct Loss
{
    double rate = 0;
    bool gilbert = false;
    double p = 0;
    double r = 0;
    double lossBad = 1;
    double lossGood = 0;
    std::set<uint64_t> ordinals; // 1-based, of every packet offered to the direction
};

// A direction's queue limit: packets, or bytes counted as linkd counts them (each packet as
// an Ethernet frame: its IP packet and 14 bytes, whatever header the link itself adds).
struct QueueLimit
{
    uint32_t value = 0;
    bool bytes = false;
    bool red = false;  // RED (gentle RED with params.gentle) in front of the limit
    NbRedParams params{};
};

// A queue word: "N" (packets) or "NB" (bytes), then "/red/..." or "/gred/..." with
// THRESH/MAXTHRESH/Q_WEIGHT/LINTERM/MEAN_PKTSIZE/IN_BYTES (0 or 1) for a RED queue, its
// parameters checked as linkd checks them.
QueueLimit ParseQueueLimit(const std::string& word);

// A loss word: "P" (Bernoulli) or "ge/P/R/LOSS_BAD/LOSS_GOOD", then "@N,N,..." for the
// ordinals of packets to drop, if any.
Loss ParseLoss(const std::string& word);

// Random losses, drawn as linkd's loss stage draws them; a Gilbert-Elliott chain's state
// carries on across changes of its parameters, as in linkd.
class LossDraw
{
  public:
    LossDraw();
    bool Lost(const Loss& loss);

  private:
    bool m_bad = false;
    ns3::Ptr<ns3::UniformRandomVariable> m_random;
};

// The receive side of a member: drops everything while the link is down (what was on the
// wire when it went down).
class LinkLoss : public ns3::ErrorModel
{
  public:
    static ns3::TypeId GetTypeId();

    const bool* down = nullptr;

  private:
    bool DoCorrupt(ns3::Ptr<ns3::Packet> p) override;
    void DoReset() override;
};

struct Member;

// A simulated LAN member's device: a point-to-point device toward the LAN's switch that
// carries Ethernet frames (its PPP frames hold an Ethernet header, so that ARP and the
// switch find members by their addresses, as on an emulated LAN), and passes up only what is
// addressed to it, to all, or to a group.
class LanDevice : public ns3::PointToPointNetDevice
{
  public:
    static ns3::TypeId GetTypeId();
    bool Send(ns3::Ptr<ns3::Packet> packet, const ns3::Address& dest, uint16_t protocol) override;
    bool SendFrom(ns3::Ptr<ns3::Packet> packet,
                  const ns3::Address& source,
                  const ns3::Address& dest,
                  uint16_t protocol) override;
    bool NeedsArp() const override;
    bool IsPointToPoint() const override;
    bool SupportsSendFrom() const override;
    void SetReceiveCallback(ns3::NetDevice::ReceiveCallback cb) override;
    void SetPromiscReceiveCallback(ns3::NetDevice::PromiscReceiveCallback cb) override;

  private:
    bool FromWire(ns3::Ptr<ns3::NetDevice>,
                  ns3::Ptr<const ns3::Packet> p,
                  uint16_t,
                  const ns3::Address&);

    ns3::NetDevice::ReceiveCallback m_up;
    ns3::NetDevice::PromiscReceiveCallback m_promisc;
};

// The PPP protocol a LAN's frames travel under (ns-3's point-to-point device knows only IP's).
constexpr uint16_t LAN_FRAME_PROTOCOL = 0x0800;

// The queue of what a member sends. It drops a packet as it arrives when its ordinal is to be
// dropped, when the loss model loses it (the model draws for every packet, as linkd's does),
// or when the link is down, before it takes a place in the queue or time on the wire. Its
// limit, in packets or bytes, and its RED count the packet the device holds as linkd's queue
// does: ns-3's device takes that packet out of its queue as it starts sending it.
class SendQueue : public ns3::DropTailQueue<ns3::Packet>
{
  public:
    static ns3::TypeId GetTypeId();
    SendQueue() = default;
    SendQueue(const SendQueue&) = delete; // it owns its RED
    SendQueue& operator=(const SendQueue&) = delete;
    ~SendQueue() override;
    bool Enqueue(ns3::Ptr<ns3::Packet> p) override;
    ns3::Ptr<ns3::Packet> Dequeue() override;
    ns3::Ptr<ns3::Packet> Remove() override;

    Member* member = nullptr;
    NbRed* red = nullptr; // owned
    uint32_t limitPackets = 0; // its limit: packets, or (when not 0) bytes
    uint32_t limitBytes = 0;

    // What the queue holds, as linkd counts it: packets and frame bytes, the one the device
    // holds among them.
    uint64_t HeldPackets(const Member& m) const;
    uint64_t HeldBytes(const Member& m) const;

  private:
    // Whether the limit leaves room for a frame of FRAME bytes beside what the queue holds.
    bool Admits(const Member& m, uint32_t frame) const;
    // The counter of the drop that RED and the limit decide for a frame of FRAME bytes, or
    // null to keep it.
    uint64_t* Decide(Member& m, uint32_t frame);

    uint64_t m_ordinal = 0;
    LossDraw m_draw;
    std::deque<uint32_t> m_frames; // the frame bytes of each packet queued, in order
    uint64_t m_frameBytes = 0;     // their sum
};

struct Member
{
    std::string node;
    uint32_t header = 0; // bytes the link adds to an IP packet
    ns3::Ptr<ns3::NetDevice> device;
    ns3::Ptr<ns3::Queue<ns3::Packet>> queue;
    ns3::Ptr<LinkLoss> error; // what this member's receive side loses (a plain link's)
    Loss sendLoss;            // of what this member sends
    double delayS = 0;        // of what this member sends
    Jitter jitter;            // of what this member sends
    Mangle mangle;            // of what this member sends
    uint32_t onWire = 0;      // the frame bytes (as linkd counts them) its device holds, or 0
    ns3::Time wireUntil;      // when the device lets that frame go (its gap after it ended)
    double rateBps = 0;       // what it sends at (0: unlimited)
    ns3::DataRate dataRate;   // the same, as its device has it
    ns3::Time gap;            // what its device leaves after each packet (Pace)
    bool idle = false;        // its queue emptied (RED's idle decay), at idleSince
    ns3::Time idleSince;
    const bool* down = nullptr;
    Counters egress;
    Counters ingress;
};

// How one member sends: one direction of a point-to-point link, or one half (the member's
// egress, or its ingress from the switch) of a LAN.
struct Pipe
{
    double rateBps = 0;
    double delayS = 0;
    QueueLimit queue;
    Loss loss;
    Jitter jitter;
    Mangle mangle;
};

// A point-to-point link of two members, the devices at its ends: a link of the experiment,
// or (LAN_MEMBER) a LAN member's link to its switch, whose frames carry an Ethernet header
// inside PPP and whose corrupted frames go on to their receivers. `down` drops what the
// members send from then on; on a plain link also what is on the wire (its receivers drop
// it), on a LAN member's link not, as linkd's blackhole lets what it passed go on, and only
// what the member sends (its switch's port passes on what was under way).
class SimLink
{
  public:
    SimLink(std::string name, bool lanMember);

    // Joins NODE's DEVICE (its queue a SendQueue, attached to the link's WireChannel) to
    // the link, sending as PIPE says. The first member added sends in the channel's
    // direction 0.
    void Add(const std::string& node,
             ns3::Ptr<ns3::PointToPointNetDevice> device,
             const Pipe& pipe);
    size_t Members() const;
    const Member& At(size_t member) const;
    // How a member sends from now on.
    void Set(size_t member, const Pipe& pipe);
    void SetDown(bool down);
    // "LINK": {"ports": {NODE: {"egress": {"counters": {...}}, "ingress": ...}}}, the shape
    // of linkd's counters reply.
    std::string CountersJson() const;
    // As linkd's "counters" object: what a member sends (SENT; with the duplicates its
    // direction made), or what reaches it (with the corrupted packets of the other
    // direction, which its receiver discards).
    void PipeJson(std::ostringstream& s, size_t member, bool sent) const;

  private:
    // The queue limit of a member's device.
    void Limit(size_t member, const QueueLimit& limit);
    // The gap a member leaves after each packet it sends at its rate (the wire bytes its
    // header lacks), and its direction of the channel.
    void Pace(size_t member);

    std::string m_name;
    bool m_lanMember;
    bool m_down = false;
    bool m_never = false; // the down of a switch's port
    std::vector<std::unique_ptr<Member>> m_members;
};

// Joins DEVICE, on NODE, to CHANNEL as nestbed-sim's links join theirs: its own queue
// (SendQueue), and the queue interface ns-3's traffic control reads.
void JoinWire(ns3::Ptr<ns3::Node> node,
              ns3::Ptr<ns3::PointToPointNetDevice> device,
              ns3::Ptr<WireChannel> channel);

// A LAN as linkd's emulated one: every member joined by a link of its own to the LAN's
// switch (a node of its own, no IP), the member's egress pipe on the way in and its ingress
// pipe on the way out. The switch sends a frame out of the port of its destination's
// member, or, for all, a group or an address it does not know, out of every other port. So
// members may differ in rate, delay, loss and queue, and have jitter, duplication and
// corruption, as on an emulated LAN, and what one member sends never waits for another's.
class SimLan
{
  public:
    explicit SimLan(std::string name);
    // A member: NODE's device on the LAN (to give its address), its egress and ingress pipes.
    ns3::Ptr<LanDevice> Add(const std::string& node,
                            ns3::Ptr<ns3::Node> at,
                            const Pipe& egress,
                            const Pipe& ingress);
    size_t Members() const;
    void Set(size_t member, const Pipe& egress, const Pipe& ingress);
    void SetDown(bool down);
    std::string CountersJson() const;

  private:
    bool Forward(ns3::Ptr<ns3::NetDevice> port,
                 ns3::Ptr<const ns3::Packet> frame,
                 uint16_t protocol,
                 const ns3::Address& from);

    std::string m_name;
    ns3::Ptr<ns3::Node> m_switch;
    // Each member's link: member 0 its device, member 1 the switch's port toward it.
    std::vector<std::unique_ptr<SimLink>> m_links;
    std::vector<ns3::Ptr<ns3::PointToPointNetDevice>> m_ports;
    std::map<ns3::Mac48Address, size_t> m_where; // each member device's address: its port
};

// A packet's bytes on an emulated link beside its IP packet: linkd counts an Ethernet frame
// on the wire (header 14, FCS 4, preamble 8, gap 12). A simulated link's device leaves the
// difference to its own header as a gap after each packet, so that a rate means as many
// packets a second as on an emulated link.
constexpr uint32_t WIRE_BYTES = 38;

// ns-3 needs a rate; an unshaped link (0) gets one far above any emulated traffic.
std::string Rate(double bps);

} // namespace nestbed
