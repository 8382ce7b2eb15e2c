"""The anomaly paper's reproduction: a connection-pair workload and a study of three node
pairs (starved sender, clean, lossy) that `nestbed analyze` must tell apart."""
