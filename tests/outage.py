"""A TCP forwarder that can take an API server away and bring it back on the same port."""

from __future__ import annotations

import asyncio

from volcano_guard_sandbox.processes import free_port


class Outage:
    """A TCP forwarder in front of the sandbox that can be taken down and brought back on the
    same port, as an API server restart looks to a client."""

    def __init__(self, target_port: int) -> None:
        self.target_port, self.port = target_port, free_port()
        self.server: asyncio.Server | None = None
        self.links: set[asyncio.StreamWriter] = set()

    async def up(self) -> None:
        self.server = await asyncio.start_server(self._link, "127.0.0.1", self.port)

    async def down(self) -> None:
        assert self.server is not None
        self.server.close()
        for writer in list(self.links):
            writer.close()
        await self.server.wait_closed()

    async def _link(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target_port)
        self.links.update({writer, up_writer})

        async def pipe(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            try:
                while data := await src.read(65536):
                    dst.write(data)
                    await dst.drain()
            except (ConnectionError, OSError):
                pass
            finally:
                dst.close()

        await asyncio.gather(pipe(reader, up_writer), pipe(up_reader, writer))
