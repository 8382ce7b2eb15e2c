"""The cluster back end: an experiment's nodes on several hosts, its cut links over VXLAN.

``share`` (pure) cuts a swap-in plan into each host's share; ``host`` carries one share out
on the host it runs on, with the Linux back end and VXLAN devices; ``agent`` is the Dask
worker each host runs, and ``backend`` the ``Backend`` that places an experiment and sends
each host its share through Dask. The data plane never goes through Dask: frames cross
hosts inside VXLAN between the hosts' own addresses (the underlay).
"""
