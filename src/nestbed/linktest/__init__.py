"""linktest: checks that a live experiment's links, routes and shaping are what its file asked
for, at Emulab's four levels (latency, routing, loss, bandwidth)."""
