// The simulated links and LANs of nestbed-sim, as events change them and as their counters
// see them.
//
// Every member of a link (a node's device on it) has a queue and a rate. On a point-to-point
// link, the member's queue decides the loss of what it sends as linkd's pipe does, as each
// packet arrives, before the queue and the rate (Bernoulli or Gilbert-Elliott, and drops by
// ordinal); on a LAN, a receive error model drops what the LAN loses on the way to the
// member. `down` makes both drop everything, as linkd's blackhole does, and `up` gives back
// the link's loss. The
// counters of each member mirror linkd's pipes: "egress" is what the member's device sends
// (into its queue, or dropped because the queue was full, and out on the wire), "ingress"
// what reaches it (kept, or dropped by the loss model or because the link was down). Bytes
// are as the link carries them: the IP packet and the link's own header (and a LAN's padding
// of short frames).
//
// Every member's queue (SendQueue, a LAN member's too) admits by its own limit and counts
// what it turns away, so ns-3's flow control never stops a device.

#pragma once

#include "ns3/core-module.h"
#include "ns3/csma-module.h"
#include "ns3/error-model.h"
#include "ns3/network-module.h"
#include "red.h"
#include "wire.h"

#include <cstdint>
#include <deque>
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

// The receive side of a member: drops what its Loss decides (a LAN's), everything while the
// link is down.
class LinkLoss : public ns3::ErrorModel
{
  public:
    static ns3::TypeId GetTypeId();

    Loss loss;
    const bool* down = nullptr;

  private:
    bool DoCorrupt(ns3::Ptr<ns3::Packet> p) override;
    void DoReset() override;

    LossDraw m_draw;
};

struct Member;

// A simulated LAN member's device: ns-3's CSMA device, deaf to link changes. SimLink attaches
// it anew to change its rate, which ns-3 announces as the link coming up again, and the ARP
// cache then forgets every neighbour (and drops what waits for one); nestbed-sim takes a
// link down with its loss models, never with a device's link state, so nothing else listens.
class LanDevice : public ns3::CsmaNetDevice
{
  public:
    void AddLinkChangeCallback(ns3::Callback<void> callback) override;
};

// The queue of what a member sends. It drops a packet as it arrives when its ordinal is to be
// dropped or when the loss model loses it (the model draws for every packet, as linkd's
// does), and on a point-to-point link when the link is down, before it takes a place in the
// queue or time on the wire (a LAN's Bernoulli loss and down act on the way to each member
// instead: LinkLoss). Its limit,
// in packets or bytes, and its RED count the packet the device holds as linkd's queue does:
// ns-3's device takes that packet out of its queue as it starts sending it (a LAN's, also
// while it backs off from a busy channel).
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

  private:
    // Whether the limit leaves room for a frame of FRAME bytes beside what the queue holds.
    bool Admits(const Member& m, uint32_t frame) const;
    // What the queue holds, as linkd counts it: packets and frame bytes, the one the device
    // holds among them.
    uint64_t HeldPackets(const Member& m) const;
    uint64_t HeldBytes(const Member& m) const;
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
    bool lan = false;
    uint32_t header = 0; // bytes the link adds to an IP packet (a LAN: and pads short ones to)
    ns3::Ptr<ns3::NetDevice> device;
    ns3::Ptr<ns3::Queue<ns3::Packet>> queue;
    ns3::Ptr<LinkLoss> error; // what this member's receive side loses
    Loss sendLoss;            // of what this member sends
    Jitter jitter;            // of what this member sends (point-to-point links)
    Mangle mangle;            // of what this member sends (point-to-point links)
    uint32_t onWire = 0;      // the frame bytes (as linkd counts them) its device holds, or 0
    double rateBps = 0;       // what it sends at (0: unlimited)
    ns3::Time gap;            // what its device leaves after each packet (Pace)
    bool idle = false;        // its queue emptied (RED's idle decay), at idleSince
    ns3::Time idleSince;
    const bool* down = nullptr;
    Counters egress;
    Counters ingress;
};

class SimLink
{
  public:
    SimLink(std::string name, bool lan);

    // A member: its device and the node it belongs to, the rate it sends at, the loss of
    // what it sends (a point-to-point link) or on the way to it (a LAN), and on a
    // point-to-point link the jitter, duplication and corruption of what it sends.
    void Add(const std::string& node,
             ns3::Ptr<ns3::NetDevice> device,
             double rateBps,
             const Loss& loss,
             const Jitter& jitter = {},
             const Mangle& mangle = {});

    bool Lan() const;
    size_t Members() const;
    // Rate and queue limit of each member's device, the delay, the loss of what each member
    // sends, and the jitter, duplication and corruption of what each member sends
    // (point-to-point links only); for a LAN, rates[0] and losses[0] stand for all.
    void Set(const std::vector<double>& rates,
             double delayS,
             const std::vector<QueueLimit>& queues,
             const std::vector<Loss>& losses,
             const std::vector<Jitter>& jitters,
             const std::vector<Mangle>& mangles);
    // The queue limit of a member's device.
    void Limit(size_t member, const QueueLimit& limit);
    // The loss of what a LAN's member sends: its drops by ordinal and Gilbert-Elliott loss,
    // as its egress pipe's on an emulated LAN (the LAN's Bernoulli loss is drawn where each
    // member receives).
    void SendLoss(size_t member, const Loss& loss);
    void SetDown(bool down);
    // "LINK": {"ports": {NODE: {"egress": {"counters": {...}}, "ingress": ...}}}, the shape
    // of linkd's counters reply.
    std::string CountersJson() const;

  private:
    // The gap a member leaves after each packet it sends at RATE (the wire bytes its header
    // lacks), and on a point-to-point link its direction of the channel.
    void Pace(size_t member, double bps);

    std::string m_name;
    bool m_lan;
    bool m_down = false;
    std::vector<std::unique_ptr<Member>> m_members;
};

// A packet's bytes on an emulated link beside its IP packet: linkd counts an Ethernet frame
// on the wire (header 14, FCS 4, preamble 8, gap 12). A simulated link's device leaves the
// difference to its own header as a gap after each packet, so that a rate means as many
// packets a second as on an emulated link.
constexpr uint32_t WIRE_BYTES = 38;

// ns-3 needs a rate; an unshaped link (0) gets one far above any emulated traffic.
std::string Rate(double bps);

} // namespace nestbed
