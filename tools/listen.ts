import type { Server } from "node:http";
import type { AddressInfo } from "node:net";

/**
 * Listens on 127.0.0.1 (port 0: a free one), for the local stand-ins; `close()` drops the connections
 * still open (a client's keep-alive would otherwise hold it open) and resolves once the server closed.
 */
export async function listenLocal(server: Server, port = 0): Promise<{ port: number; close(): Promise<void> }> {
  await new Promise<void>((resolve) => server.listen(port, "127.0.0.1", resolve));
  return {
    port: (server.address() as AddressInfo).port,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
