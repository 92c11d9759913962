import net from 'node:net';

/**
 * One TCP connection to the web tier, written and read byte for byte, for what fetch cannot do:
 * a request that never finishes, pipelining, a client that stops reading, duplicate headers.
 */
export class RawConnection {
  readonly socket: net.Socket;
  private data = Buffer.alloc(0);
  private waiters: (() => void)[] = [];
  /** Resolves when the server (or the test) closed the connection. */
  readonly closed: Promise<void>;

  constructor(url: string, opts: { paused?: boolean } = {}) {
    const { hostname, port } = new URL(url);
    this.socket = net.connect(Number(port), hostname);
    this.socket.on('error', () => undefined);
    if (!opts.paused) {
      this.socket.on('data', (chunk: Buffer) => {
        this.data = Buffer.concat([this.data, chunk]);
        this.notify();
      });
    }
    this.closed = new Promise((resolve) =>
      this.socket.once('close', () => {
        this.notify();
        resolve();
      }),
    );
  }

  write(data: string | Buffer): void {
    this.socket.write(data);
  }

  /** Everything received so far, as text. */
  get text(): string {
    return this.data.toString('utf8');
  }

  /** Resolves once the received bytes satisfy `done`; rejects if the connection closes first. */
  async until(done: (text: string) => boolean, what: string): Promise<string> {
    for (;;) {
      if (done(this.text)) return this.text;
      if (this.socket.destroyed) throw new Error(`connection closed before ${what}; received:\n${this.text}`);
      await new Promise<void>((r) => this.waiters.push(r));
    }
  }

  destroy(): void {
    this.socket.destroy();
  }

  private notify(): void {
    for (const w of this.waiters.splice(0)) w();
  }
}

/** A request's bytes: request line, headers (in order, duplicates allowed) and body. */
export function rawRequest(method: string, path: string, headers: [string, string][], body = ''): string {
  return `${method} ${path} HTTP/1.1\r\n${headers.map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n${body}`;
}
