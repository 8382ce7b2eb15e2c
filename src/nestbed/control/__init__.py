"""The experiment controller: one background process per active experiment that carries out
its run, started and spoken to through ``client.ControllerClient``.

    client.py      ControllerClient: launch (one ControllerStart document), request, alive
    controller.py  the process: the current run, next_run, `python -m nestbed.control`
    server.py      the control socket: JSON lines, refusals versus internal errors
    requests.py    one typed request per op, parsed once
    run.py         one run: its objects, start, status, finish
    scheduler.py   the event list on time, a worker thread per object
    actions.py     what each verb does to each object; events.csv
    links.py       links as events left them; link events through the link emulator
    sampler.py     links/counters.csv and nodes/usage.csv each second; live counters
    programs.py    program objects; traffic.py, bulk.py flows; cpumon.py CPU monitors
    captures.py    pcaps; linktests.py `$ns linktest` as a child process
    collector.py   the end: flow and TCP tables, the manifest's end, the report
    simulated.py   the simulated part: traffic of simulated nodes, simulated links' events
                   and counters, through nestbed-sim; simlag.py its lag behind real time
"""
