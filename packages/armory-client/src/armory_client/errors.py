"""The client's exception tree: every error it raises derives from `ArmoryClientError`.

ArmoryClientError
├── CodecError          (also a ValueError)  bytes or objects the codec refuses
├── ProtocolError       the server broke the openpi protocol (e.g. a reply not a map)
├── ServerError         the server answered with a text frame (its error message)
├── HandshakeRejected   the server refused the WebSocket upgrade (e.g. HTTP 401)
├── CertificateRejected the server's TLS certificate failed verification
├── ConnectionLost      the connection closed while a request was in flight
├── ConnectTimeout      (also a TimeoutError) no usable connection within the budget
└── RequestTimeout      (also a TimeoutError) no reply within the request timeout
"""

from __future__ import annotations


class ArmoryClientError(Exception):
    """Base class of every error raised by armory_client."""


class CodecError(ArmoryClientError, ValueError):
    """An object cannot be encoded, or bytes cannot be decoded, by the wire codec."""


class ProtocolError(ArmoryClientError):
    """The server sent something the openpi protocol does not allow."""


class ServerError(ArmoryClientError):
    """The server sent a text frame: an error message about this client's request."""

    def __init__(self, message: str) -> None:
        super().__init__(f"policy server error: {message}")
        # The server's own text, unchanged.
        self.message = message


class HandshakeRejected(ArmoryClientError):
    """The server answered the WebSocket handshake with an HTTP error (not retried)."""

    def __init__(self, status_code: int, uri: str, reason: str = "") -> None:
        hint = " (check the API key)" if status_code in (401, 403) else ""
        said = f": {reason}" if reason else ""
        super().__init__(f"server at {uri} rejected the handshake: HTTP {status_code}{hint}{said}")
        # HTTP status of the rejection.
        self.status_code = status_code
        # The server's own words (the first line of its answer), possibly empty.
        self.reason = reason


class CertificateRejected(ArmoryClientError):
    """The server's TLS certificate failed verification (not retried)."""

    def __init__(self, uri: str, reason: str) -> None:
        super().__init__(
            f"the TLS certificate of {uri} is not trusted: {reason} (for a self-signed "
            "certificate pass ssl_context=ssl.create_default_context(cafile=...) or set "
            "SSL_CERT_FILE)"
        )


class ConnectionLost(ArmoryClientError):
    """The connection closed after a request was sent and before its reply arrived."""


class ConnectTimeout(ArmoryClientError, TimeoutError):
    """No connection (handshake plus metadata frame) within the connect timeout."""


class RequestTimeout(ArmoryClientError, TimeoutError):
    """No reply to a request within the request timeout."""
