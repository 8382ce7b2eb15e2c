"""The publish/subscribe flexibility study (Esposito et al., SEUS 2010): formats and compression."""
