import net from 'node:net';

/** One command as MONITOR reports it: who sent it ("lua" for a script's own commands) and its arguments. */
export interface MonitoredCommand {
  source: string;
  args: string[];
}

/** A MONITOR session: every command the server runs, from the moment start() resolves. */
export interface RedisMonitor {
  on(fn: (c: MonitoredCommand) => void): void;
  stop(): void;
}

const unescape = (s: string): string =>
  s.replace(/\\(x[0-9a-fA-F]{2}|.)/g, (_, e: string) =>
    e.startsWith('x') && e.length === 3
      ? String.fromCharCode(parseInt(e.slice(1), 16))
      : e === 'n'
        ? '\n'
        : e === 'r'
          ? '\r'
          : e === 't'
            ? '\t'
            : e,
  );

/** `+1795610437.785524 [0 127.0.0.1:33112] "xreadgroup" "GROUP" …` */
function parse(line: string): MonitoredCommand | undefined {
  const m = /^\+\d+\.\d+ \[\d+ ([^\]]+)\] (.*)$/.exec(line);
  if (!m) return undefined;
  const args = [...m[2]!.matchAll(/"((?:[^"\\]|\\.)*)"/g)].map((a) => unescape(a[1]!));
  return { source: m[1]!, args };
}

/**
 * MONITOR over a plain socket. ioredis's own monitor mode can mistake the first monitored line for
 * a command's reply when the server is busy ("Command queue state error"), so tests that count
 * round trips read the protocol themselves: after MONITOR's +OK every line is one command.
 */
export async function monitorRedis(url: string): Promise<RedisMonitor> {
  const u = new URL(url);
  const socket = net.connect(Number(u.port || 6379), u.hostname || '127.0.0.1');
  const listeners: ((c: MonitoredCommand) => void)[] = [];
  let buffer = '';
  let started = false;
  // With a password, AUTH's +OK comes before MONITOR's; after MONITOR's, every line is a command.
  let oks = u.password ? 2 : 1;
  await new Promise<void>((resolve, reject) => {
    socket.once('error', reject);
    socket.on('data', (chunk: Buffer) => {
      buffer += chunk.toString('latin1');
      let end: number;
      while ((end = buffer.indexOf('\r\n')) >= 0) {
        const line = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        if (!started) {
          if (line.startsWith('-')) return reject(new Error(`MONITOR refused: ${line}`));
          if (line === '+OK' && --oks === 0) {
            started = true;
            resolve();
          }
          continue;
        }
        const c = parse(line);
        if (c) for (const fn of listeners) fn(c);
      }
    });
    const auth = u.password
      ? `AUTH ${decodeURIComponent(u.username || 'default')} ${decodeURIComponent(u.password)}\r\n`
      : '';
    socket.write(`${auth}MONITOR\r\n`);
  });
  return {
    on: (fn) => listeners.push(fn),
    stop: () => socket.destroy(),
  };
}
