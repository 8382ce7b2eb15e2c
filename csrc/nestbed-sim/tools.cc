// nestbed's traffic tools in simulated nodes (see tools.h).

#include "tools.h"

#include "ns3/internet-module.h"

#include <ctime>
#include <sstream>
#include <stdexcept>
#include <unordered_set>
#include <vector>

using namespace ns3;

namespace nestbed
{

namespace
{

int64_t g_origin = 0; // CLOCK_MONOTONIC ns at simulated time 0

constexpr uint32_t kHeaderBytes = 12; // the probe header: seq u32, burst u16, send_ns u48
constexpr uint64_t kTimestampMask = (uint64_t{1} << 48) - 1;
constexpr uint32_t kChunk = 1 << 16;

std::string
Optional(bool present, int64_t value)
{
    return present ? std::to_string(value) : "null";
}

// A JSON string: the messages here are ns-3's socket errors and our own, no control
// characters, but quotes and backslashes are escaped all the same.
std::string
Quoted(const std::string& text)
{
    std::string out = "\"";
    for (char c : text)
    {
        if (c == '"' || c == '\\')
        {
            out += '\\';
        }
        out += c;
    }
    return out + "\"";
}

class UdpReceiverTool : public Tool
{
  public:
    UdpReceiverTool(Ptr<Node> node, uint16_t port, const std::string& log, const std::string& out)
        : Tool(out)
    {
        m_log = std::fopen(log.c_str(), "w");
        if (m_log == nullptr)
        {
            throw std::runtime_error("cannot write the receive log " + log);
        }
        std::fputs("seq,burst,send_ns,recv_ns,size,delay_ns\n", m_log);
        m_socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        if (m_socket->Bind(InetSocketAddress(Ipv4Address::GetAny(), port)) != 0)
        {
            std::fclose(m_log);
            throw std::runtime_error("UDP port " + std::to_string(port) + " is taken");
        }
        m_socket->SetRecvCallback(MakeCallback(&UdpReceiverTool::Read, this));
    }

  private:
    void Read(Ptr<Socket> socket)
    {
        while (Ptr<Packet> packet = socket->Recv())
        {
            uint32_t size = packet->GetSize();
            int64_t now = SimMonoNs();
            ++m_packets;
            m_bytes += size;
            if (size < kHeaderBytes)
            {
                ++m_malformed;
                continue;
            }
            uint8_t h[kHeaderBytes];
            packet->CopyData(h, kHeaderBytes);
            uint32_t seq = (uint32_t{h[0]} << 24) | (uint32_t{h[1]} << 16) |
                           (uint32_t{h[2]} << 8) | h[3];
            uint32_t burst = (uint32_t{h[4]} << 8) | h[5];
            uint64_t sent = 0;
            for (int i = 6; i < 12; ++i)
            {
                sent = (sent << 8) | h[i];
            }
            uint64_t delay = (static_cast<uint64_t>(now) - sent) & kTimestampMask;
            m_seqs.insert(seq);
            m_first = m_first ? m_first : now;
            m_last = now;
            std::fprintf(m_log,
                         "%u,%u,%llu,%lld,%u,%llu\n",
                         seq,
                         burst,
                         static_cast<unsigned long long>(sent),
                         static_cast<long long>(now),
                         size,
                         static_cast<unsigned long long>(delay));
        }
    }

    void Halt() override
    {
        m_socket->SetRecvCallback(MakeNullCallback<void, Ptr<Socket>>());
        m_socket->Close();
        std::fclose(m_log);
    }

    std::string Summary() const override
    {
        std::ostringstream s;
        s << "{\"role\":\"recv\",\"packets\":" << m_packets << ",\"bytes\":" << m_bytes
          << ",\"unique\":" << m_seqs.size() << ",\"malformed\":" << m_malformed
          << ",\"first_recv_ns\":" << Optional(m_first, m_first)
          << ",\"last_recv_ns\":" << Optional(m_first, m_last) << "}";
        return s.str();
    }

    Ptr<Socket> m_socket;
    std::FILE* m_log = nullptr;
    uint64_t m_packets = 0;
    uint64_t m_bytes = 0;
    uint64_t m_malformed = 0;
    std::unordered_set<uint32_t> m_seqs;
    int64_t m_first = 0;
    int64_t m_last = 0;
};

class UdpSenderTool : public Tool
{
  public:
    UdpSenderTool(Ptr<Node> node,
                  Ipv4Address to,
                  uint16_t port,
                  uint32_t size,
                  double intervalS,
                  uint64_t count,
                  const std::string& out)
        : Tool(out),
          m_payload(std::max(size, kHeaderBytes), 0),
          m_intervalNs(intervalS * 1e9),
          m_count(count)
    {
        m_socket = Socket::CreateSocket(node, UdpSocketFactory::GetTypeId());
        m_socket->Bind();
        m_socket->Connect(InetSocketAddress(to, port));
        m_startNs = Simulator::Now().GetNanoSeconds();
        m_next = Simulator::ScheduleNow(&UdpSenderTool::Send, this);
    }

  private:
    void Send()
    {
        uint64_t stamp = static_cast<uint64_t>(SimMonoNs()) & kTimestampMask;
        uint32_t seq = static_cast<uint32_t>(m_attempted);
        uint8_t* h = m_payload.data();
        for (int i = 0; i < 4; ++i)
        {
            h[i] = static_cast<uint8_t>(seq >> (24 - 8 * i));
        }
        h[4] = h[5] = 0; // no bursts
        for (int i = 0; i < 6; ++i)
        {
            h[6 + i] = static_cast<uint8_t>(stamp >> (40 - 8 * i));
        }
        Ptr<Packet> packet = Create<Packet>(h, m_payload.size());
        if (m_socket->Send(packet) >= 0)
        {
            ++m_sent;
            m_bytes += m_payload.size();
            m_first = m_first ? m_first : SimMonoNs();
            m_last = SimMonoNs();
        }
        else
        {
            ++m_errors;
        }
        ++m_attempted;
        if (m_count && m_attempted >= m_count)
        {
            Finish();
            return;
        }
        // From the start, not from the last send: a fractional interval does not drift.
        int64_t at = m_startNs + static_cast<int64_t>(m_attempted * m_intervalNs);
        m_next = Simulator::Schedule(NanoSeconds(at) - Simulator::Now(), &UdpSenderTool::Send, this);
    }

    void Halt() override
    {
        m_next.Cancel();
        m_socket->Close();
    }

    std::string Summary() const override
    {
        std::ostringstream s;
        s << "{\"role\":\"send\",\"payload_bytes\":" << m_payload.size()
          << ",\"packets_attempted\":" << m_attempted << ",\"packets_sent\":" << m_sent
          << ",\"bytes_sent\":" << m_bytes << ",\"send_errors\":" << m_errors
          << ",\"first_send_ns\":" << Optional(m_first, m_first)
          << ",\"last_send_ns\":" << Optional(m_first, m_last) << "}";
        return s.str();
    }

    Ptr<Socket> m_socket;
    std::vector<uint8_t> m_payload;
    double m_intervalNs;
    uint64_t m_count;
    int64_t m_startNs = 0;
    EventId m_next;
    uint64_t m_attempted = 0;
    uint64_t m_sent = 0;
    uint64_t m_bytes = 0;
    uint64_t m_errors = 0;
    int64_t m_first = 0;
    int64_t m_last = 0;
};

class TcpReceiverTool : public Tool
{
  public:
    TcpReceiverTool(Ptr<Node> node, uint16_t port, uint32_t window, const std::string& out)
        : Tool(out)
    {
        m_listener = Socket::CreateSocket(node, TcpSocketFactory::GetTypeId());
        if (window)
        {
            m_listener->SetAttribute("RcvBufSize", UintegerValue(window));
        }
        if (m_listener->Bind(InetSocketAddress(Ipv4Address::GetAny(), port)) != 0)
        {
            throw std::runtime_error("TCP port " + std::to_string(port) + " is taken");
        }
        m_listener->Listen();
        m_listener->SetAcceptCallback(MakeNullCallback<bool, Ptr<Socket>, const Address&>(),
                                      MakeCallback(&TcpReceiverTool::Accepted, this));
    }

  private:
    void Accepted(Ptr<Socket> socket, const Address&)
    {
        if (m_connection)
        {
            socket->Close(); // one connection, as the bulk receiver accepts
            return;
        }
        m_connection = socket;
        socket->SetRecvCallback(MakeCallback(&TcpReceiverTool::Read, this));
        socket->SetCloseCallbacks(MakeCallback(&TcpReceiverTool::Closed, this),
                                  MakeCallback(&TcpReceiverTool::Closed, this));
    }

    void Read(Ptr<Socket> socket)
    {
        while (Ptr<Packet> packet = socket->Recv())
        {
            uint32_t n = packet->GetSize();
            if (n == 0)
            {
                break;
            }
            int64_t now = SimMonoNs();
            m_first = m_first ? m_first : now;
            auto second = static_cast<size_t>((now - m_first) / 1000000000);
            if (m_intervals.size() <= second)
            {
                m_intervals.resize(second + 1, 0);
            }
            m_intervals[second] += n;
            m_bytes += n;
            m_last = now;
        }
    }

    // The sender closed: what is left is read, and this side closes too.
    void Closed(Ptr<Socket> socket)
    {
        Read(socket);
        Finish();
    }

    void Halt() override
    {
        m_listener->Close();
        if (m_connection)
        {
            m_connection->SetRecvCallback(MakeNullCallback<void, Ptr<Socket>>());
            m_connection->Close();
        }
    }

    std::string Summary() const override
    {
        std::ostringstream s;
        s << "{\"bytes\":" << m_bytes << ",\"first_ns\":" << Optional(m_first, m_first)
          << ",\"seconds\":" << (m_first ? (m_last - m_first) / 1e9 : 0.0) << ",\"intervals\":[";
        for (size_t i = 0; i < m_intervals.size(); ++i)
        {
            s << (i ? "," : "") << m_intervals[i];
        }
        s << "]}";
        return s.str();
    }

    Ptr<Socket> m_listener;
    Ptr<Socket> m_connection;
    uint64_t m_bytes = 0;
    int64_t m_first = 0;
    int64_t m_last = 0;
    std::vector<uint64_t> m_intervals;
};

TypeId
Congestion(const std::string& name)
{
    // The names the emulated side gives the kernel (bulk's --congestion).
    if (name == "reno")
    {
        return TcpLinuxReno::GetTypeId();
    }
    if (name == "vegas")
    {
        return TcpVegas::GetTypeId();
    }
    if (name == "cubic")
    {
        return TcpCubic::GetTypeId();
    }
    throw std::runtime_error("no congestion control " + name + " in simulated nodes");
}

class TcpSenderTool : public Tool
{
  public:
    TcpSenderTool(Ptr<Node> node,
                  Ipv4Address to,
                  uint16_t port,
                  uint64_t bytes,
                  uint32_t window,
                  const std::string& congestion,
                  const std::string& out)
        : Tool(out),
          m_amount(bytes)
    {
        Ptr<TcpL4Protocol> tcp = node->GetObject<TcpL4Protocol>();
        m_socket = congestion.empty() ? tcp->CreateSocket() : tcp->CreateSocket(Congestion(congestion));
        if (window)
        {
            m_socket->SetAttribute("SndBufSize", UintegerValue(window));
        }
        m_socket->TraceConnectWithoutContext(
            "State",
            MakeCallback(&TcpSenderTool::State, this));
        m_socket->TraceConnectWithoutContext(
            "Retransmission",
            MakeCallback(&TcpSenderTool::Retransmitted, this));
        m_socket->SetConnectCallback(MakeCallback(&TcpSenderTool::Connected, this),
                                     MakeCallback(&TcpSenderTool::Failed, this));
        m_socket->SetSendCallback(MakeCallback(&TcpSenderTool::Space, this));
        m_socket->SetCloseCallbacks(MakeCallback(&TcpSenderTool::Ignore, this),
                                    MakeCallback(&TcpSenderTool::Failed, this));
        m_socket->Bind();
        m_startNs = SimMonoNs();
        m_socket->Connect(InetSocketAddress(to, port));
        std::ostringstream where;
        where << to << ":" << port;
        m_peer = where.str();
    }

  private:
    void Connected(Ptr<Socket>)
    {
        m_connected = true;
        Fill();
    }

    void Space(Ptr<Socket>, uint32_t)
    {
        if (m_connected && !Done())
        {
            Fill();
        }
    }

    void Fill()
    {
        while (!m_closing && (m_amount == 0 || m_sent < m_amount))
        {
            uint64_t want = m_amount ? std::min<uint64_t>(kChunk, m_amount - m_sent) : kChunk;
            uint32_t room = m_socket->GetTxAvailable();
            if (room == 0)
            {
                return; // Space() comes back when there is
            }
            int n = m_socket->Send(Create<Packet>(std::min<uint64_t>(want, room)));
            if (n <= 0)
            {
                return;
            }
            m_sent += n;
        }
        if (!m_closing)
        {
            m_closing = true; // FIN after the data
            m_socket->Close();
        }
    }

    void State(TcpSocket::TcpStates_t, TcpSocket::TcpStates_t now)
    {
        // Our FIN, after all the data, is acknowledged: everything has arrived.
        if (m_closing && !Done() &&
            (now == TcpSocket::FIN_WAIT_2 || now == TcpSocket::TIME_WAIT ||
             now == TcpSocket::CLOSED))
        {
            m_delivered = true;
            Finish();
        }
    }

    void Retransmitted(Ptr<const Packet>,
                       const TcpHeader&,
                       const Address&,
                       const Address&,
                       Ptr<const TcpSocketBase>)
    {
        ++m_retransmits;
    }

    void Failed(Ptr<Socket> socket)
    {
        if (!Done())
        {
            m_error = "connection to " + m_peer + " failed (" +
                      std::to_string(static_cast<int>(socket->GetErrno())) + ")";
            Finish();
        }
    }

    void Ignore(Ptr<Socket>)
    {
    }

    void Halt() override
    {
        m_socket->SetSendCallback(MakeNullCallback<void, Ptr<Socket>, uint32_t>());
        if (!m_closing)
        {
            m_closing = true;
            m_socket->Close();
        }
    }

    std::string Summary() const override
    {
        std::ostringstream s;
        s << "{\"bytes\":" << m_sent << ",\"seconds\":" << (SimMonoNs() - m_startNs) / 1e9
          << ",\"retransmits\":" << m_retransmits
          << ",\"delivered\":" << (m_delivered ? "true" : "false")
          << ",\"error\":" << (m_error.empty() ? "null" : Quoted(m_error)) << "}";
        return s.str();
    }

    Ptr<Socket> m_socket;
    uint64_t m_amount;
    uint64_t m_sent = 0;
    uint64_t m_retransmits = 0;
    int64_t m_startNs = 0;
    bool m_connected = false;
    bool m_closing = false;
    bool m_delivered = false;
    std::string m_peer;
    std::string m_error;
};

} // namespace

int64_t
MonoNs()
{
    timespec now{};
    clock_gettime(CLOCK_MONOTONIC, &now);
    return int64_t{now.tv_sec} * 1000000000 + now.tv_nsec;
}

void
SetClockOrigin(int64_t monoAtSimulatedZeroNs)
{
    g_origin = monoAtSimulatedZeroNs;
}

int64_t
SimMonoNs()
{
    return g_origin + Simulator::Now().GetNanoSeconds();
}

Tool::Tool(std::string out)
    : m_out(std::move(out))
{
}

void
Tool::Stop()
{
    Finish();
}

bool
Tool::Done() const
{
    return m_done;
}

void
Tool::Finish()
{
    if (m_done)
    {
        return;
    }
    m_done = true;
    Halt();
    if (std::FILE* f = std::fopen(m_out.c_str(), "w"))
    {
        std::fprintf(f, "%s\n", Summary().c_str());
        std::fclose(f);
    }
}

std::unique_ptr<Tool>
UdpReceiver(Ptr<Node> node, uint16_t port, const std::string& log, const std::string& out)
{
    return std::make_unique<UdpReceiverTool>(node, port, log, out);
}

std::unique_ptr<Tool>
UdpSender(Ptr<Node> node,
          Ipv4Address to,
          uint16_t port,
          uint32_t size,
          double intervalS,
          uint64_t count,
          const std::string& out)
{
    return std::make_unique<UdpSenderTool>(node, to, port, size, intervalS, count, out);
}

std::unique_ptr<Tool>
TcpReceiver(Ptr<Node> node, uint16_t port, uint32_t window, const std::string& out)
{
    return std::make_unique<TcpReceiverTool>(node, port, window, out);
}

std::unique_ptr<Tool>
TcpSender(Ptr<Node> node,
          Ipv4Address to,
          uint16_t port,
          uint64_t bytes,
          uint32_t window,
          const std::string& congestion,
          const std::string& out)
{
    return std::make_unique<TcpSenderTool>(node, to, port, bytes, window, congestion, out);
}

} // namespace nestbed
