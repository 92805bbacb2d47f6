"""A small TCP forwarder for multi-host tests: agents in their own network namespaces
reach the broker through an address on their link, so taking the link down cuts them
off exactly as a network fault would (the broker itself may listen on a unix socket)."""

from __future__ import annotations

import contextlib
import socket
import threading


class TcpProxy:
    def __init__(self, listen: tuple[str, int], target: str | tuple[str, int]):
        """``target``: a (host, port) pair, or the path of a unix socket."""
        self.target = target
        self.server = socket.create_server(listen)
        self.address = self.server.getsockname()[:2]
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True, name="tcp-proxy")

    def start(self) -> TcpProxy:
        self._thread.start()
        return self

    def _connect(self) -> socket.socket:
        if isinstance(self.target, str):
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(self.target)
            return upstream
        return socket.create_connection(self.target)

    def _accept(self) -> None:
        self.server.settimeout(0.2)
        while not self._stop.is_set():
            try:
                client, _ = self.server.accept()
            except OSError:
                continue
            try:
                upstream = self._connect()
            except OSError:
                client.close()
                continue
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    @staticmethod
    def _pump(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                dst.sendall(data)
        for sock in (src, dst):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(5)
        self.server.close()
