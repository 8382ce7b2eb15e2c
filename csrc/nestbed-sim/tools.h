// nestbed's traffic tools, run by simulated nodes: what nestbed-probe (UDP at a constant rate,
// a receiver that logs every datagram) and nestbed.control.bulk (a bulk TCP transfer and its
// receiver) do in an emulated node, done by ns-3 sockets in a simulated one. They speak the
// same wire format (the probe's 12-byte header) and write the same JSON summaries and logs,
// so a flow between an emulated and a simulated node works in both directions and its
// results are read by the same code as any other flow's.
//
// Times in headers, logs and summaries are CLOCK_MONOTONIC nanoseconds, the clock every
// network namespace of the host shares; a simulated node reads it as the moment its
// simulated clock stands for (SimMonoNs), so simulated delays are the simulation's own.

#pragma once

#include "ns3/core-module.h"
#include "ns3/network-module.h"

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>

namespace nestbed
{

// CLOCK_MONOTONIC now, in nanoseconds.
int64_t MonoNs();

// Ties the simulated clock to CLOCK_MONOTONIC; called once the real-time simulator runs.
void SetClockOrigin(int64_t monoAtSimulatedZeroNs);

// The CLOCK_MONOTONIC time that the simulator's now stands for.
int64_t SimMonoNs();

// One running tool: started by a command, stopped by one (or by itself: a sender of a given
// amount), then writes its summary, one JSON line, to its output file.
class Tool
{
  public:
    explicit Tool(std::string out);
    virtual ~Tool() = default;
    Tool(const Tool&) = delete;
    Tool& operator=(const Tool&) = delete;

    // Stops it (if it still runs) and writes its summary; once.
    void Stop();
    bool Done() const;

  protected:
    virtual void Halt() = 0;              // closes its sockets, cancels its events
    virtual std::string Summary() const = 0; // the JSON line
    void Finish();                       // Halt, then the summary; once

  private:
    std::string m_out;
    bool m_done = false;
};

// A receiver of probe datagrams on PORT: LOG gets one CSV line per datagram (as
// `nestbed-probe recv --log`), the summary counts datagrams, bytes and distinct sequence
// numbers.
std::unique_ptr<Tool> UdpReceiver(ns3::Ptr<ns3::Node> node,
                                  uint16_t port,
                                  const std::string& log,
                                  const std::string& out);

// Probe datagrams of SIZE payload bytes to TO:PORT every INTERVAL_S seconds, COUNT of them
// (0: until stopped).
std::unique_ptr<Tool> UdpSender(ns3::Ptr<ns3::Node> node,
                                ns3::Ipv4Address to,
                                uint16_t port,
                                uint32_t size,
                                double intervalS,
                                uint64_t count,
                                const std::string& out);

// Accepts one TCP connection on PORT and reads it to its end (WINDOW: receive buffer bytes,
// 0 for ns-3's default); the summary has the bytes per whole second since the first.
std::unique_ptr<Tool> TcpReceiver(ns3::Ptr<ns3::Node> node,
                                  uint16_t port,
                                  uint32_t window,
                                  const std::string& out);

// Sends BYTES (0: until stopped) over TCP to TO:PORT with the congestion control CONGESTION
// ("" for ns-3's default) and then closes; done when its FIN is acknowledged, so everything
// it sent has arrived.
std::unique_ptr<Tool> TcpSender(ns3::Ptr<ns3::Node> node,
                                ns3::Ipv4Address to,
                                uint16_t port,
                                uint64_t bytes,
                                uint32_t window,
                                const std::string& congestion,
                                const std::string& out);

} // namespace nestbed
