// The benchmark's reference point: the least any relay written in Node can add. One process that
// forwards each request to the upstream over keep-alive connections and pipes the answer back,
// doing nothing else (no auth, no limits, no queue, no Redis). Measured in the same rounds as the
// direct and service runs, it shows what one extra Node hop costs on this machine, which the
// service (web, Redis, worker, Redis again, web) cannot beat.
//
//   node dist/bench/pass-through.js --upstream http://127.0.0.1:PORT
import http from 'node:http';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({ options: { upstream: { type: 'string' }, port: { type: 'string', default: '0' } } });
if (!a.upstream) throw new Error('--upstream is required');
const upstream = new URL(a.upstream);
const agent = new http.Agent({ keepAlive: true, maxSockets: Infinity, scheduling: 'lifo' });

const server = http.createServer((req, res) => {
  const body: Buffer[] = [];
  req.on('data', (d: Buffer) => body.push(d));
  req.on('end', () => {
    const payload = Buffer.concat(body);
    const out = http.request(
      {
        host: upstream.hostname,
        port: upstream.port,
        method: req.method,
        path: req.url,
        agent,
        headers: {
          'content-type': 'application/json',
          'content-length': payload.length,
          authorization: req.headers.authorization ?? '',
        },
      },
      (answer) => {
        res.writeHead(answer.statusCode ?? 502, {
          'content-type': answer.headers['content-type'] ?? 'application/json',
          'cache-control': 'no-cache',
        });
        answer.pipe(res);
      },
    );
    out.once('error', () => res.destroy());
    // A client that leaves early stops the upstream request; a finished one leaves the connection pooled.
    res.once('close', () => {
      if (!res.writableFinished) out.destroy();
    });
    out.end(payload);
  });
});

server.keepAliveTimeout = 60_000;
server.listen(Number(a.port), '127.0.0.1', () => {
  const { port } = server.address() as { port: number };
  process.send?.({ port });
});
process.on('SIGTERM', () => server.close(() => process.exit(0)));
