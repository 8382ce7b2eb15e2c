// The attachments of nestbed-sim (an emulated node's veth end, read and written through an
// AF_PACKET socket), and the time a frame waits between the kernel and the simulation.
//
// ns-3's FdNetDevice writes the frames; reading is nestbed-sim's own. FdNetDevice's reader
// thread reads one frame a call and schedules one simulator event for each, so a busy
// attachment costs a wake-up, a lock and an event per frame. AttachDevice's reader takes
// every frame waiting on the socket at once (recvmmsg), each with the kernel's receive time
// (SO_TIMESTAMPNS), and hands them to the simulator in one event while the last batch is
// still waiting for its turn.
//
// A frame enters the simulation when that event runs, later than the kernel received it.
// That wait travels with the packet (WaitTag), and each simulated point-to-point link it
// crosses gives it up from its delay (GiveUp, never below the time the packet is on the wire
// nor before the packet ahead of it), as nestbed-linkd counts a frame's delay from the
// kernel's receive time. What no link could give up is still with the frame when it leaves
// through an attachment, and is counted there (Waits: the `waits` command).
//
// The real-time scheduler sleeps until an event is due and wakes some tens of microseconds
// late. A frame due to leave the simulation through an attachment is due at a time the
// wall clock must meet, so the simulator busy-waits the last `spin` of it (WakeFor), unless
// another frame arrives meanwhile.

#pragma once

#include "ns3/core-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/network-module.h"

#include <array>
#include <atomic>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nestbed
{

// The wait a packet has not yet given up, in nanoseconds.
class WaitTag : public ns3::Tag
{
  public:
    static ns3::TypeId GetTypeId();
    ns3::TypeId GetInstanceTypeId() const override;
    uint32_t GetSerializedSize() const override;
    void Serialize(ns3::TagBuffer i) const override;
    void Deserialize(ns3::TagBuffer i) override;
    void Print(std::ostream& os) const override;

    uint64_t waitNs = 0;
};

// A distribution of durations: count, mean, 50th and 99th percentiles (to the microsecond,
// up to 10 ms; beyond, the largest) and the extremes.
class Spread
{
  public:
    void Add(int64_t ns);
    std::string Json() const;

  private:
    static constexpr size_t kBuckets = 10000; // of 1 µs
    std::array<uint64_t, kBuckets + 1> m_us{};
    uint64_t m_count = 0;
    int64_t m_sumNs = 0;
    int64_t m_minNs = 0;
    int64_t m_maxNs = 0;
};

// What the attachments measured, for the `waits` command and the exit line.
struct WaitStats
{
    Spread wait;    // kernel receive → the simulated time the frame entered at
    Spread late;    // that simulated time → the real time its event ran (the scheduler's lag)
    Spread outLate; // a frame's simulated time of leaving → the real time it was written
    uint64_t givenUpNs = 0; // of the waits, what simulated links gave up from their delays
    uint64_t keptNs = 0;    // of the waits, what frames still had when they left
    std::atomic<uint64_t> dropped{0}; // frames read while 65 536 waited (the reader's thread)
    uint64_t unstamped = 0; // frames without a kernel receive time (counted as no wait)
};

WaitStats& Waits();
std::string WaitsJson();

// Gives up at most AVAILABLE of the wait packet P carries (a link's delay beyond what it must
// keep); what it gave up, which the caller takes off the packet's delay. Counted among the
// waits given up unless P is a copy (a duplicate) or goes no further (corrupted).
ns3::Time GiveUp(ns3::Ptr<ns3::Packet> p, ns3::Time available, bool counted = true);

// How long before a frame's due time the simulator busy-waits for it, if the frame's next
// node has an attachment (0: it sleeps to the due time as for any event).
void SetSpin(ns3::Time spin);
// Called as a link schedules a packet's arrival at NODE at DUE.
void WakeFor(uint32_t nodeId, ns3::Time due);

// Hands PACKET, which came to DEVICE in an Ethernet frame with HEADER, to the node as an
// Ethernet device does: to PROMISC, if set, whatever its destination, and to RX, if set, if
// it is for DEVICE's own address, for all, or for a group.
void HandUp(ns3::Ptr<ns3::NetDevice> device,
            ns3::Ptr<ns3::Packet> packet,
            const ns3::EthernetHeader& header,
            const ns3::NetDevice::PromiscReceiveCallback& promisc,
            const ns3::NetDevice::ReceiveCallback& rx);

class AttachDevice : public ns3::FdNetDevice
{
  public:
    static ns3::TypeId GetTypeId();

    void SetNode(ns3::Ptr<ns3::Node> node) override;
    void SetReceiveCallback(ns3::NetDevice::ReceiveCallback cb) override;
    void SetPromiscReceiveCallback(PromiscReceiveCallback cb) override;
    bool SendFrom(ns3::Ptr<ns3::Packet> packet,
                  const ns3::Address& source,
                  const ns3::Address& dest,
                  uint16_t protocolNumber) override;

    struct Frame
    {
        size_t offset;
        size_t length;
        int64_t kernelNs; // CLOCK_REALTIME, 0 if the kernel gave none
    };

    // From the reader thread: frames read from the socket (their bytes one after another).
    void Deliver(const uint8_t* bytes, const std::vector<Frame>& frames);

  private:
    struct Batch
    {
        std::vector<uint8_t> bytes;
        std::vector<Frame> frames;
    };

    ns3::Ptr<ns3::FdReader> DoCreateFdReader() override;
    void Drain();
    void Up(ns3::Ptr<ns3::Packet> frame, int64_t waitNs);

    uint32_t m_nodeId = 0;
    ns3::NetDevice::ReceiveCallback m_rx;
    PromiscReceiveCallback m_promiscRx;
    std::mutex m_lock; // m_pending and m_scheduled, shared with the reader thread
    Batch m_pending;
    bool m_scheduled = false;
    Batch m_work; // the simulator's thread only
    ns3::Time m_lastReceived; // the last frame's kernel time, on the simulator's clock
    ns3::Time m_lastEntry;    // when it entered the simulation
};

} // namespace nestbed
