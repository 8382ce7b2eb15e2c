// nestbed-sim: the simulated part of an experiment, run by ns-3 in real time.
//
// Reads a description of simulated nodes, links, LANs, attachments and routes on stdin (one
// statement a line, written by nestbed.backend.simplan; the grammar is below), builds it in
// ns-3, and runs ns-3's real-time simulator until SIGTERM or SIGINT. An attachment joins an
// emulated node to a simulated one: the caller opens an AF_PACKET socket on the far end of the
// node's veth pair and passes it as a file descriptor, which an AttachDevice (attach.h) reads
// and writes.
//
// Lines, words separated by blanks (addresses are "A.B.C.D/LEN"):
//   hard_limit_s SECONDS              the lag behind real time the experiment allows
//   tick_s SECONDS                    how often the lag is sampled
//   spin_s SECONDS                    how long before a frame is due to leave through an
//                                     attachment the simulator busy-waits for it (attach.h;
//                                     100 µs if not given; 0: it sleeps until then, as for
//                                     any event)
//   control FD                        a listening Unix socket for commands (below)
//   node NAME
//   p2p LINK NODE_A ADDR_A NODE_B ADDR_B RATE_A_BPS RATE_B_BPS DELAY_S QUEUE_A QUEUE_B LOSS_A LOSS_B
//       [JITTER_A JITTER_B [MANGLE_A MANGLE_B]]
//       (RATE_A, QUEUE_A, LOSS_A and JITTER_A act on packets from A to B; a queue limit is
//       "N" packets or "NB" bytes, each packet counted as an Ethernet frame; a loss is
//       "P", Bernoulli, or "ge/P/R/LOSS_BAD/LOSS_GOOD", Gilbert-Elliott as linkd draws it,
//       then "@N,N,..." for the ordinals of packets to drop; a jitter "0" or
//       "JITTER_S/DISTRIBUTION/REORDER", as wire.h delivers it; a mangle "0" or
//       "DUPLICATE/CORRUPT", probabilities, as wire.h carries them out)
//   lan LAN NODE ADDR EGRESS INGRESS [NODE ADDR EGRESS INGRESS ...]
//       (EGRESS, what the member sends, and INGRESS, what reaches it, are each a pipe of
//       six words, RATE_BPS DELAY_S QUEUE LOSS JITTER MANGLE, words as a p2p link's: the
//       member's pipes to and from the LAN's switch, as on an emulated LAN)
//   attach LINK NODE ADDR FD [MTU]
//       (MTU: the largest IP packet the attachment's interface carries, 1500 if not given;
//       less across a cluster's VXLAN, where ns-3 fragments what is larger)
//   route NODE PREFIX NEXT_HOP        PREFIX "0.0.0.0/0" is the default route
//   cbr NAME FROM_NODE TO_ADDR PORT PACKET_BYTES RATE_BPS START_S STOP_S
//       (UDP at a constant rate in simulated time, STOP_S 0 for never; a simulated node
//       that owns TO_ADDR gets a sink on PORT, so nothing answers with ICMP)
//   end
//
// Commands on the control socket, one a line, each answered by one JSON line ({"ok": true,
// ...} or {"ok": false, "error": "..."}); they run in the simulator's thread, at the real
// time they arrive. Paths are percent-encoded (%20 for a blank, %25 for %). The traffic tools
// are those of tools.h, named by an ID of the caller's:
//   udp-recv ID NODE PORT LOG OUT
//   udp-send ID NODE TO_ADDR PORT SIZE INTERVAL_S COUNT OUT       (COUNT 0: until stopped)
//   tcp-recv ID NODE PORT WINDOW OUT                              (WINDOW 0: ns-3's default)
//   tcp-send ID NODE TO_ADDR PORT BYTES WINDOW CONGESTION OUT     (BYTES 0: until stopped,
//                                                                  CONGESTION - : default)
//   stop ID                           stops a tool; it writes its summary to OUT
//   state ID                          {"done": true|false}
//   p2p-set LINK RATE_A_BPS RATE_B_BPS DELAY_S QUEUE_A QUEUE_B LOSS_A LOSS_B
//           [JITTER_A JITTER_B [MANGLE_A MANGLE_B]]
//   lan-set LAN EGRESS INGRESS [EGRESS INGRESS ...]                  (each member's pipes)
//   link LINK up|down                 down drops every packet on the link until up
//   counters                          {"links": {LINK: {"ports": {NODE: {"egress": ...}}}}}
//   waits                             {"waits": {...}}: the attachments' frames' waits between
//                                     the kernel and the simulation, what links gave up of
//                                     them and what was kept, and the lateness of frames out
//
// Output on stdout, one line each: "ready", then every second "lag SECOND MAX_S WORST_S LATE"
// (MAX_S the largest lag sampled in simulated second SECOND, counted from the start; WORST_S
// the largest so far; LATE how many samples passed the hard limit so far), and on exit
// "worst_lag_s WORST_S late LATE", then "waits {...}" as the waits command answers.
// Errors in the description: one line "error: ..." on stderr and exit status 2.

#include "attach.h"
#include "links.h"
#include "tools.h"

#include "ns3/applications-module.h"
#include "ns3/core-module.h"
#include "ns3/fd-net-device-module.h"
#include "ns3/internet-module.h"
#include "ns3/network-module.h"
#include "ns3/point-to-point-module.h"
#include "ns3/traffic-control-module.h"

#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <future>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

using namespace ns3;
using namespace nestbed;

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

// A word that PARSE reads (links.h's ParseQueueLimit, ParseLoss), its complaint a bad line.
template <typename T>
T
ParsedWord(std::istringstream& words, const char* what, T (*parse)(const std::string&))
{
    auto word = Word<std::string>(words, what);
    try
    {
        return parse(word);
    }
    catch (const std::invalid_argument& e)
    {
        throw BadLine(e.what());
    }
}

QueueLimit
QueueWord(std::istringstream& words)
{
    return ParsedWord(words, "queue limit", &ParseQueueLimit);
}

Loss
LossWord(std::istringstream& words)
{
    return ParsedWord(words, "loss", &ParseLoss);
}

// The words that may end a p2p statement or command: a jitter for each direction, then a
// mangle for each; none without them.
struct Tail
{
    std::vector<Jitter> jitters = std::vector<Jitter>(2);
    std::vector<Mangle> mangles = std::vector<Mangle>(2);
};

Tail
TailWords(std::istringstream& words)
{
    std::vector<std::string> rest;
    std::string word;
    while (words >> word)
    {
        rest.push_back(word);
    }
    if (!rest.empty() && rest.size() != 2 && rest.size() != 4)
    {
        throw BadLine("a jitter for each direction, then a mangle for each, or none");
    }
    Tail tail;
    try
    {
        for (size_t i = 0; i < rest.size(); ++i)
        {
            if (i < 2)
            {
                tail.jitters[i] = ParseJitter(rest[i]);
            }
            else
            {
                tail.mangles[i - 2] = ParseMangle(rest[i]);
            }
        }
    }
    catch (const std::invalid_argument& e)
    {
        throw BadLine(e.what());
    }
    return tail;
}

// A LAN member's pipe: RATE_BPS DELAY_S QUEUE LOSS JITTER MANGLE.
Pipe
PipeWords(std::istringstream& words)
{
    Pipe pipe;
    pipe.rateBps = Word<double>(words, "rate");
    pipe.delayS = Word<double>(words, "delay");
    pipe.queue = QueueWord(words);
    pipe.loss = LossWord(words);
    pipe.jitter = ParsedWord(words, "jitter", &ParseJitter);
    pipe.mangle = ParsedWord(words, "mangle", &ParseMangle);
    return pipe;
}

// A path of a command, percent-encoded so that it is one word.
std::string
PathWord(std::istringstream& words, const char* what)
{
    auto text = Word<std::string>(words, what);
    std::string path;
    for (size_t i = 0; i < text.size(); ++i)
    {
        if (text[i] == '%' && i + 2 < text.size())
        {
            path += static_cast<char>(std::stoi(text.substr(i + 1, 2), nullptr, 16));
            i += 2;
        }
        else
        {
            path += text[i];
        }
    }
    return path;
}

std::string
Reply(const std::string& fields)
{
    return "{\"ok\":true" + (fields.empty() ? "" : "," + fields) + "}";
}

std::string
Refusal(const std::string& error)
{
    std::string quoted;
    for (char c : error)
    {
        if (c == '"' || c == '\\')
        {
            quoted += '\\';
        }
        quoted += c;
    }
    return "{\"ok\":false,\"error\":\"" + quoted + "\"}";
}

class Simulation
{
  public:
    void Read(std::istream& in);
    void Run();

  private:
    Ptr<Node> Find(const std::string& name) const;
    Ptr<Node> Owner(Ipv4Address address) const;
    SimLink& FindLink(const std::string& name);
    SimLan& FindLan(const std::string& name);
    void Address(Ptr<Node> node, Ptr<NetDevice> device, const std::string& text);
    void Statement(const std::string& verb, std::istringstream& words);
    std::string Command(const std::string& line);
    std::string Tool(const std::string& verb, std::istringstream& words);
    void Serve();
    void Converse(int fd);
    void Tick();

    std::map<std::string, Ptr<Node>> m_nodes;
    std::map<std::string, std::unique_ptr<SimLink>> m_links;
    std::map<std::string, std::unique_ptr<SimLan>> m_lans;
    std::map<std::string, std::unique_ptr<nestbed::Tool>> m_tools;
    std::vector<Ptr<NetDevice>> m_devices;
    int m_control = -1;
    double m_hardLimitS = 0.005;
    double m_tickS = 0.01;
    double m_maxInSecondS = 0;
    double m_worstS = 0;
    uint64_t m_late = 0;
    int64_t m_second = 0;
    bool m_clockSet = false;
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

SimLink&
Simulation::FindLink(const std::string& name)
{
    auto it = m_links.find(name);
    if (it == m_links.end())
    {
        throw BadLine(m_lans.count(name) ? name + " is a LAN, not a p2p link"
                                         : "unknown simulated link " + name);
    }
    return *it->second;
}

SimLan&
Simulation::FindLan(const std::string& name)
{
    auto it = m_lans.find(name);
    if (it == m_lans.end())
    {
        throw BadLine(m_links.count(name) ? name + " is a p2p link, not a LAN"
                                          : "unknown simulated LAN " + name);
    }
    return *it->second;
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
    else if (verb == "spin_s")
    {
        SetSpin(Seconds(Word<double>(words, "spin")));
    }
    else if (verb == "control")
    {
        m_control = Word<int>(words, "file descriptor");
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
        auto name = Word<std::string>(words, "link name");
        auto nodeA = Word<std::string>(words, "node");
        Ptr<Node> a = Find(nodeA);
        auto addrA = Word<std::string>(words, "address");
        auto nodeB = Word<std::string>(words, "node");
        Ptr<Node> b = Find(nodeB);
        auto addrB = Word<std::string>(words, "address");
        auto rateA = Word<double>(words, "rate");
        auto rateB = Word<double>(words, "rate");
        auto delay = Word<double>(words, "delay");
        QueueLimit queueA = QueueWord(words);
        QueueLimit queueB = QueueWord(words);
        Loss lossA = LossWord(words);
        Loss lossB = LossWord(words);
        Tail tail = TailWords(words);
        Ptr<WireChannel> channel = CreateObject<WireChannel>();
        auto link = std::make_unique<SimLink>(name, false);
        for (auto [node, at, pipe] : {std::tuple{nodeA, a, Pipe{rateA, delay, queueA, lossA,
                                                              tail.jitters[0], tail.mangles[0]}},
                                      std::tuple{nodeB, b, Pipe{rateB, delay, queueB, lossB,
                                                              tail.jitters[1], tail.mangles[1]}}})
        {
            Ptr<PointToPointNetDevice> device = CreateObject<PointToPointNetDevice>();
            device->SetAddress(Mac48Address::Allocate());
            JoinWire(at, device, channel);
            link->Add(node, device, pipe);
        }
        Address(a, link->At(0).device, addrA);
        Address(b, link->At(1).device, addrB);
        m_links[name] = std::move(link);
    }
    else if (verb == "lan")
    {
        auto name = Word<std::string>(words, "LAN name");
        auto lan = std::make_unique<SimLan>(name);
        std::string node;
        while (words >> node)
        {
            auto addr = Word<std::string>(words, "address");
            Pipe egress = PipeWords(words);
            Pipe ingress = PipeWords(words);
            Address(Find(node), lan->Add(node, Find(node), egress, ingress), addr);
        }
        m_lans[name] = std::move(lan);
    }
    else if (verb == "attach")
    {
        auto link = Word<std::string>(words, "link name");
        Ptr<Node> node = Find(Word<std::string>(words, "node"));
        auto addr = Word<std::string>(words, "address");
        auto fd = Word<int>(words, "file descriptor");
        Ptr<AttachDevice> device = CreateObject<AttachDevice>();
        uint16_t mtu = 0;
        if (words >> mtu && !device->SetMtu(mtu))
        {
            throw BadLine("bad MTU " + std::to_string(mtu));
        }
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

// A traffic tool started by a command; its ID must be new.
std::string
Simulation::Tool(const std::string& verb, std::istringstream& words)
{
    auto id = Word<std::string>(words, "tool id");
    if (m_tools.count(id))
    {
        throw BadLine("tool " + id + " already exists");
    }
    Ptr<Node> node = Find(Word<std::string>(words, "node"));
    std::unique_ptr<nestbed::Tool> tool;
    if (verb == "udp-recv")
    {
        auto port = Word<uint16_t>(words, "port");
        auto log = PathWord(words, "log path");
        tool = UdpReceiver(node, port, log, PathWord(words, "output path"));
    }
    else if (verb == "udp-send")
    {
        Ipv4Address to(Word<std::string>(words, "address").c_str());
        auto port = Word<uint16_t>(words, "port");
        auto size = Word<uint32_t>(words, "size");
        auto interval = Word<double>(words, "interval");
        auto count = Word<uint64_t>(words, "count");
        if (!(interval > 0))
        {
            throw BadLine("the interval must be above 0");
        }
        tool = UdpSender(node, to, port, size, interval, count, PathWord(words, "output path"));
    }
    else if (verb == "tcp-recv")
    {
        auto port = Word<uint16_t>(words, "port");
        auto window = Word<uint32_t>(words, "window");
        tool = TcpReceiver(node, port, window, PathWord(words, "output path"));
    }
    else
    {
        Ipv4Address to(Word<std::string>(words, "address").c_str());
        auto port = Word<uint16_t>(words, "port");
        auto bytes = Word<uint64_t>(words, "bytes");
        auto window = Word<uint32_t>(words, "window");
        auto congestion = Word<std::string>(words, "congestion control");
        auto out = PathWord(words, "output path");
        tool = TcpSender(node, to, port, bytes, window, congestion == "-" ? "" : congestion, out);
    }
    m_tools[id] = std::move(tool);
    return Reply("");
}

std::string
Simulation::Command(const std::string& line)
{
    std::istringstream words(line);
    std::string verb;
    words >> verb;
    try
    {
        if (verb == "udp-recv" || verb == "udp-send" || verb == "tcp-recv" || verb == "tcp-send")
        {
            return Tool(verb, words);
        }
        if (verb == "stop" || verb == "state")
        {
            auto id = Word<std::string>(words, "tool id");
            auto it = m_tools.find(id);
            if (it == m_tools.end())
            {
                throw BadLine("no tool " + id);
            }
            if (verb == "stop")
            {
                it->second->Stop();
            }
            return Reply(std::string("\"done\":") + (it->second->Done() ? "true" : "false"));
        }
        if (verb == "p2p-set")
        {
            SimLink& link = FindLink(Word<std::string>(words, "link name"));
            Pipe a, b;
            a.rateBps = Word<double>(words, "rate");
            b.rateBps = Word<double>(words, "rate");
            a.delayS = b.delayS = Word<double>(words, "delay");
            a.queue = QueueWord(words);
            b.queue = QueueWord(words);
            a.loss = LossWord(words);
            b.loss = LossWord(words);
            Tail tail = TailWords(words);
            std::tie(a.jitter, b.jitter) = std::tie(tail.jitters[0], tail.jitters[1]);
            std::tie(a.mangle, b.mangle) = std::tie(tail.mangles[0], tail.mangles[1]);
            link.Set(0, a);
            link.Set(1, b);
            return Reply("");
        }
        if (verb == "lan-set")
        {
            SimLan& lan = FindLan(Word<std::string>(words, "LAN name"));
            std::vector<std::pair<Pipe, Pipe>> pipes;
            for (size_t i = 0; i < lan.Members(); ++i)
            {
                Pipe egress = PipeWords(words);
                pipes.emplace_back(egress, PipeWords(words));
            }
            std::string rest;
            if (words >> rest)
            {
                throw BadLine("more words than the LAN's members' pipes: " + rest);
            }
            for (size_t i = 0; i < pipes.size(); ++i)
            {
                lan.Set(i, pipes[i].first, pipes[i].second);
            }
            return Reply("");
        }
        if (verb == "link")
        {
            auto name = Word<std::string>(words, "link name");
            auto state = Word<std::string>(words, "state");
            if (state != "up" && state != "down")
            {
                throw BadLine("a link is up or down, not " + state);
            }
            if (m_lans.count(name))
            {
                FindLan(name).SetDown(state == "down");
            }
            else
            {
                FindLink(name).SetDown(state == "down");
            }
            return Reply("");
        }
        if (verb == "waits")
        {
            return Reply(WaitsJson());
        }
        if (verb == "counters")
        {
            std::string links;
            for (const auto& [name, link] : m_links)
            {
                links += (links.empty() ? "" : ",") + link->CountersJson();
            }
            for (const auto& [name, lan] : m_lans)
            {
                links += (links.empty() ? "" : ",") + lan->CountersJson();
            }
            return Reply("\"links\":{" + links + "}");
        }
        throw BadLine("unknown command " + verb);
    }
    catch (const std::exception& e)
    {
        return Refusal(verb + ": " + e.what());
    }
}

// Answers on the control socket, a thread per connection; each command runs in the
// simulator's thread at the real time it arrives, and its reply waits for it.
void
Simulation::Serve()
{
    while (true)
    {
        int fd = accept(m_control, nullptr, nullptr);
        if (fd < 0)
        {
            if (errno == EINTR)
            {
                continue;
            }
            return;
        }
        std::thread(&Simulation::Converse, this, fd).detach();
    }
}

void
Simulation::Converse(int fd)
{
    std::string pending;
    char buffer[4096];
    while (true)
    {
        ssize_t n = read(fd, buffer, sizeof(buffer));
        if (n <= 0)
        {
            if (n < 0 && errno == EINTR)
            {
                continue;
            }
            close(fd);
            return;
        }
        pending.append(buffer, n);
        size_t end;
        while ((end = pending.find('\n')) != std::string::npos)
        {
            std::string line = pending.substr(0, end);
            pending.erase(0, end + 1);
            std::promise<std::string> reply;
            std::future<std::string> answer = reply.get_future();
            m_impl->ScheduleRealtimeNowWithContext(
                Simulator::NO_CONTEXT,
                MakeEvent([this, line, &reply]() { reply.set_value(Command(line)); }));
            std::string text = answer.get() + "\n";
            for (size_t done = 0; done < text.size();)
            {
                ssize_t w = write(fd, text.data() + done, text.size() - done);
                if (w <= 0 && errno != EINTR)
                {
                    close(fd);
                    return;
                }
                done += w > 0 ? w : 0;
            }
        }
    }
}

void
Simulation::Tick()
{
    if (!m_clockSet)
    {
        SetClockOrigin(MonoNs() - m_impl->RealtimeNow().GetNanoSeconds());
        m_clockSet = true;
    }
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
    if (m_control >= 0)
    {
        std::thread(&Simulation::Serve, this).detach();
    }
    std::printf("ready\n");
    std::fflush(stdout);
    Simulator::Run();
    // Tools still running write their summaries (a run's end stops them first; this is for
    // a simulator stopped under them).
    for (auto& [id, tool] : m_tools)
    {
        tool->Stop();
    }
    std::printf("worst_lag_s %.6f late %llu\n", m_worstS, static_cast<unsigned long long>(m_late));
    std::printf("waits {%s}\n", WaitsJson().c_str());
    std::fflush(stdout);
}

} // namespace

int
main()
{
    GlobalValue::Bind("SimulatorImplementationType", StringValue("ns3::RealtimeSimulatorImpl"));
    GlobalValue::Bind("ChecksumEnabled", BooleanValue(true));
    // Full-sized segments, as a 1500-byte MTU with timestamps gives the emulated nodes.
    Config::SetDefault("ns3::TcpSocket::SegmentSize", UintegerValue(1448));
    // ns-2's minrto_ (0.2 s), as the experiment files are ns-2's, rather than ns-3's 1 s.
    Config::SetDefault("ns3::TcpSocketBase::MinRto", TimeValue(MilliSeconds(200)));
    // Address resolution as the emulated nodes' Linux does it: the request sent at once
    // (ns-3 waits up to 10 ms, against collisions on a shared medium no simulated LAN has),
    // and up to 101 packets kept for the answer (Linux's unres_qlen; ns-3 keeps 3 and drops
    // the rest, so a flow's start on a LAN with a delay lost packets an emulated LAN keeps).
    Config::SetDefault("ns3::ArpL3Protocol::RequestJitter",
                       StringValue("ns3::ConstantRandomVariable[Constant=0.0]"));
    Config::SetDefault("ns3::ArpCache::PendingQueueSize", UintegerValue(101));
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
    // Connection threads may still wait on the socket: end without tearing down under them.
    std::fflush(nullptr);
    _exit(0);
}
