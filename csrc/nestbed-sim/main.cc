// nestbed-sim: the simulated part of an experiment, run by ns-3 in real time.
//
// Reads a description of simulated nodes, links, LANs, attachments and routes on stdin (one
// statement a line, written by nestbed.backend.simplan; the grammar is below), builds it in
// ns-3, and runs ns-3's real-time simulator until SIGTERM or SIGINT. An attachment joins an
// emulated node to a simulated one: the caller opens an AF_PACKET socket on the far end of the
// node's veth pair and passes it as a file descriptor, which an FdNetDevice reads and writes.
//
// Lines, words separated by blanks (addresses are "A.B.C.D/LEN"):
//   hard_limit_s SECONDS              the lag behind real time the experiment allows
//   tick_s SECONDS                    how often the lag is sampled
//   node NAME
//   p2p LINK NODE_A ADDR_A NODE_B ADDR_B RATE_A_BPS RATE_B_BPS DELAY_S QUEUE_PACKETS LOSS_A LOSS_B
//       (RATE_A and LOSS_A act on packets from A to B)
//   lan LAN RATE_BPS DELAY_S QUEUE_PACKETS NODE ADDR [NODE ADDR ...]
//   attach LINK NODE ADDR FD
//   route NODE PREFIX NEXT_HOP        PREFIX "0.0.0.0/0" is the default route
//   cbr NAME FROM_NODE TO_ADDR PORT PACKET_BYTES RATE_BPS START_S STOP_S
//       (UDP at a constant rate in simulated time, STOP_S 0 for never; a simulated node
//       that owns TO_ADDR gets a sink on PORT, so nothing answers with ICMP)
//   end
//
// Output on stdout, one line each: "ready", then every second "lag SECOND MAX_S WORST_S LATE"
// (MAX_S the largest lag sampled in simulated second SECOND, counted from the start; WORST_S
// the largest so far; LATE how many samples passed the hard limit so far), and on exit
// "worst_lag_s WORST_S late LATE".
// Errors in the description: one line "error: ..." on stderr and exit status 2.

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/csma-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <atomic>
#include <csignal>
#include <cstdio>
#include <iostream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

using namespace ns3;

namespace
{

std::atomic<bool> g_stop{false};

void
OnSignal(int)
{
    g_stop = true;
}

struct BadLine : std::runtime_error
{
    using std::runtime_error::runtime_error;
};

struct Interface
{
    Ipv4Address address;
    Ipv4Mask mask;
};

// "10.1.1.2/24" as an address and a mask.
Interface
ParseInterface(const std::string& text)
{
    auto slash = text.find('/');
    if (slash == std::string::npos)
    {
        throw BadLine("address " + text + " has no prefix length");
    }
    Interface result;
    result.address = Ipv4Address(text.substr(0, slash).c_str());
    result.mask = Ipv4Mask(("/" + text.substr(slash + 1)).c_str());
    return result;
}

class Simulation
{
  public:
    void Read(std::istream& in);
    void Run();

  private:
    Ptr<Node> Find(const std::string& name) const;
    Ptr<Node> Owner(Ipv4Address address) const;
    void Address(Ptr<Node> node, Ptr<NetDevice> device, const std::string& text);
    void Statement(const std::string& verb, std::istringstream& words);
    void Tick();

    std::map<std::string, Ptr<Node>> m_nodes;
    std::vector<Ptr<NetDevice>> m_devices;
    double m_hardLimitS = 0.005;
    double m_tickS = 0.01;
    double m_maxInSecondS = 0;
    double m_worstS = 0;
    uint64_t m_late = 0;
    int64_t m_second = 0;
    Ptr<RealtimeSimulatorImpl> m_impl;
};

Ptr<Node>
Simulation::Find(const std::string& name) const
{
    auto it = m_nodes.find(name);
    if (it == m_nodes.end())
    {
        throw BadLine("unknown simulated node " + name);
    }
    return it->second;
}

Ptr<Node>
Simulation::Owner(Ipv4Address address) const
{
    for (const auto& [name, node] : m_nodes)
    {
        Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
        for (uint32_t i = 0; i < ipv4->GetNInterfaces(); ++i)
        {
            for (uint32_t j = 0; j < ipv4->GetNAddresses(i); ++j)
            {
                if (ipv4->GetAddress(i, j).GetLocal() == address)
                {
                    return node;
                }
            }
        }
    }
    return nullptr;
}

void
Simulation::Address(Ptr<Node> node, Ptr<NetDevice> device, const std::string& text)
{
    Interface iface = ParseInterface(text);
    Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
    int32_t index = ipv4->AddInterface(device);
    ipv4->AddAddress(index, Ipv4InterfaceAddress(iface.address, iface.mask));
    ipv4->SetMetric(index, 1);
    ipv4->SetUp(index);
    m_devices.push_back(device);
}

template <typename T>
T
Word(std::istringstream& words, const char* what)
{
    T value;
    if (!(words >> value))
    {
        throw BadLine(std::string("missing or bad ") + what);
    }
    return value;
}

std::string
Rate(double bps)
{
    // ns-3 needs a rate; an unshaped link (0) gets one far above any emulated traffic.
    std::ostringstream out;
    out << static_cast<uint64_t>(bps > 0 ? bps : 100e9) << "bps";
    return out.str();
}

void
SetLoss(Ptr<NetDevice> device, double loss)
{
    if (loss <= 0)
    {
        return;
    }
    Ptr<RateErrorModel> model = CreateObject<RateErrorModel>();
    model->SetAttribute("ErrorUnit", EnumValue(RateErrorModel::ERROR_UNIT_PACKET));
    model->SetAttribute("ErrorRate", DoubleValue(loss));
    device->SetAttribute("ReceiveErrorModel", PointerValue(model));
}

std::string
QueueSize(uint32_t packets)
{
    return std::to_string(packets) + "p";
}

void
Simulation::Statement(const std::string& verb, std::istringstream& words)
{
    if (verb == "hard_limit_s")
    {
        m_hardLimitS = Word<double>(words, "hard limit");
    }
    else if (verb == "tick_s")
    {
        m_tickS = Word<double>(words, "tick");
    }
    else if (verb == "node")
    {
        auto name = Word<std::string>(words, "node name");
        Ptr<Node> node = CreateObject<Node>();
        InternetStackHelper().Install(node);
        m_nodes[name] = node;
    }
    else if (verb == "p2p")
    {
        auto link = Word<std::string>(words, "link name");
        Ptr<Node> a = Find(Word<std::string>(words, "node"));
        auto addrA = Word<std::string>(words, "address");
        Ptr<Node> b = Find(Word<std::string>(words, "node"));
        auto addrB = Word<std::string>(words, "address");
        auto rateA = Word<double>(words, "rate");
        auto rateB = Word<double>(words, "rate");
        auto delay = Word<double>(words, "delay");
        auto queue = Word<uint32_t>(words, "queue limit");
        auto lossA = Word<double>(words, "loss");
        auto lossB = Word<double>(words, "loss");
        PointToPointHelper p2p;
        p2p.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
        p2p.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(QueueSize(queue)));
        NetDeviceContainer devices = p2p.Install(a, b);
        devices.Get(0)->SetAttribute("DataRate", StringValue(Rate(rateA)));
        devices.Get(1)->SetAttribute("DataRate", StringValue(Rate(rateB)));
        SetLoss(devices.Get(1), lossA); // lost on the way from A to B
        SetLoss(devices.Get(0), lossB);
        Address(a, devices.Get(0), addrA);
        Address(b, devices.Get(1), addrB);
    }
    else if (verb == "lan")
    {
        auto lan = Word<std::string>(words, "LAN name");
        auto rate = Word<double>(words, "rate");
        auto delay = Word<double>(words, "delay");
        auto queue = Word<uint32_t>(words, "queue limit");
        CsmaHelper csma;
        csma.SetChannelAttribute("DataRate", StringValue(Rate(rate)));
        csma.SetChannelAttribute("Delay", TimeValue(Seconds(delay)));
        csma.SetQueue("ns3::DropTailQueue<Packet>", "MaxSize", StringValue(QueueSize(queue)));
        std::vector<std::pair<Ptr<Node>, std::string>> members;
        std::string name;
        while (words >> name)
        {
            members.emplace_back(Find(name), Word<std::string>(words, "address"));
        }
        NodeContainer nodes;
        for (auto& [node, addr] : members)
        {
            nodes.Add(node);
        }
        NetDeviceContainer devices = csma.Install(nodes);
        for (uint32_t i = 0; i < members.size(); ++i)
        {
            Address(members[i].first, devices.Get(i), members[i].second);
        }
    }
    else if (verb == "attach")
    {
        auto link = Word<std::string>(words, "link name");
        Ptr<Node> node = Find(Word<std::string>(words, "node"));
        auto addr = Word<std::string>(words, "address");
        auto fd = Word<int>(words, "file descriptor");
        Ptr<FdNetDevice> device = CreateObject<FdNetDevice>();
        device->SetAddress(Mac48Address::Allocate());
        node->AddDevice(device);
        device->SetFileDescriptor(fd);
        Address(node, device, addr);
    }
    else if (verb == "route")
    {
        Ptr<Node> node = Find(Word<std::string>(words, "node"));
        Interface dest = ParseInterface(Word<std::string>(words, "prefix"));
        Ipv4Address via(Word<std::string>(words, "next hop").c_str());
        Ptr<Ipv4> ipv4 = node->GetObject<Ipv4>();
        int32_t out = -1;
        for (uint32_t i = 0; i < ipv4->GetNInterfaces() && out < 0; ++i)
        {
            for (uint32_t j = 0; j < ipv4->GetNAddresses(i); ++j)
            {
                Ipv4InterfaceAddress a = ipv4->GetAddress(i, j);
                if (a.GetMask().IsMatch(a.GetLocal(), via) && i != 0)
                {
                    out = static_cast<int32_t>(i);
                }
            }
        }
        if (out < 0)
        {
            std::ostringstream msg;
            msg << "next hop " << via << " is on none of the node's links";
            throw BadLine(msg.str());
        }
        Ipv4StaticRoutingHelper helper;
        Ptr<Ipv4StaticRouting> routing = helper.GetStaticRouting(ipv4);
        routing->AddNetworkRouteTo(dest.address.CombineMask(dest.mask), dest.mask, via, out);
    }
    else if (verb == "cbr")
    {
        auto name = Word<std::string>(words, "traffic name");
        Ptr<Node> from = Find(Word<std::string>(words, "node"));
        Ipv4Address to(Word<std::string>(words, "address").c_str());
        auto port = Word<uint16_t>(words, "port");
        auto bytes = Word<uint32_t>(words, "packet size");
        auto rate = Word<double>(words, "rate");
        auto start = Word<double>(words, "start");
        auto stop = Word<double>(words, "stop");
        OnOffHelper onoff("ns3::UdpSocketFactory", InetSocketAddress(to, port));
        onoff.SetConstantRate(DataRate(Rate(rate)), bytes);
        ApplicationContainer apps = onoff.Install(from);
        if (Ptr<Node> owner = Owner(to))
        {
            PacketSinkHelper sink("ns3::UdpSocketFactory",
                                  InetSocketAddress(Ipv4Address::GetAny(), port));
            apps.Add(sink.Install(owner));
        }
        apps.Start(Seconds(start));
        if (stop > start)
        {
            apps.Stop(Seconds(stop));
        }
    }
    else
    {
        throw BadLine("unknown statement " + verb);
    }
}

void
Simulation::Read(std::istream& in)
{
    std::string line;
    int number = 0;
    bool ended = false;
    while (!ended && std::getline(in, line))
    {
        ++number;
        std::istringstream words(line);
        std::string verb;
        if (!(words >> verb) || verb[0] == '#')
        {
            continue;
        }
        if (verb == "end")
        {
            ended = true;
            continue;
        }
        try
        {
            Statement(verb, words);
        }
        catch (const BadLine& e)
        {
            throw BadLine("line " + std::to_string(number) + " (" + verb + "): " + e.what());
        }
    }
    if (!ended)
    {
        throw BadLine("the description has no end line");
    }
}

void
Simulation::Tick()
{
    double lag = (m_impl->RealtimeNow() - Simulator::Now()).GetSeconds();
    m_maxInSecondS = std::max(m_maxInSecondS, lag);
    m_worstS = std::max(m_worstS, lag);
    if (lag > m_hardLimitS)
    {
        ++m_late;
    }
    int64_t second = static_cast<int64_t>(Simulator::Now().GetSeconds());
    if (second != m_second)
    {
        std::printf("lag %lld %.6f %.6f %llu\n",
                    static_cast<long long>(m_second),
                    m_maxInSecondS,
                    m_worstS,
                    static_cast<unsigned long long>(m_late));
        std::fflush(stdout);
        m_second = second;
        m_maxInSecondS = 0;
    }
    if (g_stop)
    {
        Simulator::Stop();
        return;
    }
    Simulator::Schedule(Seconds(m_tickS), &Simulation::Tick, this);
}

void
Simulation::Run()
{
    m_impl = DynamicCast<RealtimeSimulatorImpl>(Simulator::GetImplementation());
    // The lag is measured and reported rather than fatal: a run that falls behind is marked,
    // not killed in the middle of its measurements.
    m_impl->SetSynchronizationMode(RealtimeSimulatorImpl::SYNC_BEST_EFFORT);
    // The links' own queues are the only ones: a traffic-control queue of 1000 packets in
    // front of each device would hide the link's queue limit.
    TrafficControlHelper tch;
    for (auto& device : m_devices)
    {
        if (device->GetNode()->GetObject<TrafficControlLayer>()->GetRootQueueDiscOnDevice(device))
        {
            tch.Uninstall(device);
        }
    }
    Simulator::Schedule(Seconds(0), &Simulation::Tick, this);
    std::printf("ready\n");
    std::fflush(stdout);
    Simulator::Run();
    std::printf("worst_lag_s %.6f late %llu\n", m_worstS, static_cast<unsigned long long>(m_late));
    std::fflush(stdout);
    Simulator::Destroy();
}

} // namespace

int
main()
{
    GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    struct sigaction action = {};
    action.sa_handler = OnSignal;
    sigaction(SIGTERM, &action, nullptr);
    sigaction(SIGINT, &action, nullptr);
    Simulation simulation;
    try
    {
        simulation.Read(std::cin);
    }
    catch (const std::exception& e)
    {
        std::fprintf(stderr, "error: %s\n", e.what());
        return 2;
    }
    simulation.Run();
    return 0;
}
