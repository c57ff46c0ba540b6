"""TLS for the front doors: the server's one certificate and key, checked and loaded.

One pair (``--server.tls-cert-file``, ``--server.tls-key-file``) serves every door
whose unmodified clients can speak TLS: the openpi WebSocket door (``wss://``) and
the LeRobot gRPC door (gRPC server credentials). GR00T's ZeroMQ client has no TLS;
docs/security.md says how to tunnel it.
"""

from __future__ import annotations

import ssl
from pathlib import Path

from armory.engine.config import ServerConfig

MAX_TLS_VERSION = ssl.TLSVersion.TLSv1_2
"""The newest TLS the asyncio doors speak (see :func:`server_ssl_context`)."""


def server_ssl_context(config: ServerConfig) -> ssl.SSLContext | None:
    """Called when a door starts: a TLS server context holding the configured pair
    (TLS 1.2), or None when none is configured. A missing or unreadable
    file, or a key that does not match the certificate, raises an OSError naming both."""
    if config.tls_cert_file is None or config.tls_key_file is None:
        return None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    # TLS 1.2 at most: Python 3.11's asyncio TLS (the openpi door's) now and then never
    # delivers the request a TLS 1.3 client sends right behind its handshake, and that
    # robot's connection hangs (measured: 8 of about 340 fresh servers under load; none of
    # 300 with TLS 1.2, where the server speaks last in the handshake). docs/security.md.
    context.maximum_version = MAX_TLS_VERSION
    try:
        context.load_cert_chain(config.tls_cert_file, config.tls_key_file)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(
            f"cannot load the TLS certificate {config.tls_cert_file!r} with the key "
            f"{config.tls_key_file!r} (--server.tls-cert-file, --server.tls-key-file): {exc}"
        ) from None
    return context


def pem_key_pair(config: ServerConfig) -> tuple[bytes, bytes] | None:
    """Called when the gRPC door starts: (private key, certificate chain) as PEM bytes for
    ``grpc.ssl_server_credentials``, checked as :func:`server_ssl_context` checks them;
    None when no pair is configured."""
    if server_ssl_context(config) is None:
        return None
    assert config.tls_cert_file is not None and config.tls_key_file is not None
    return Path(config.tls_key_file).read_bytes(), Path(config.tls_cert_file).read_bytes()


def server_trust(config: ServerConfig, ca_file: str | None = None) -> ssl.SSLContext | None:
    """A TLS client context for reaching servers that present ``config``'s certificate
    (the front door of ``armory cluster`` reading its replicas): it trusts the CA in
    ``ca_file``, or else the system's CAs and that certificate itself (a self-signed
    one); host names are checked. None when ``config`` has no TLS."""
    if config.tls_cert_file is None:
        return None
    try:
        if ca_file is not None:
            return ssl.create_default_context(cafile=ca_file)
        context = ssl.create_default_context()
        context.load_verify_locations(cafile=config.tls_cert_file)
    except (OSError, ssl.SSLError) as exc:
        raise OSError(
            f"cannot load the certificates to trust from {ca_file or config.tls_cert_file!r}: {exc}"
        ) from None
    return context
