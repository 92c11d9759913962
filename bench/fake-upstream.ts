// The benchmark's upstream: an OpenAI-compatible chat-completions server with fixed pacing, so
// direct-to-upstream and through-the-service runs see the same model behaviour. Runs as its own
// process (it must not share an event loop with the load generator or the service).
//
//   node dist/bench/fake-upstream.js --port 0 --tokens 64 --ttft-ms 0 --itl-ms 1
//
// An answer is `--tokens` long and ends with finish_reason stop (as a model's own end does, which
// the Responses API reports as completed), or length when the request's max_tokens or
// max_completion_tokens cut it shorter.
//
// A request whose `user` field is "ttft=<ms>" waits that long before its first token (the
// idle-streams memory run uses it; the service passes `user` through to the upstream).
// It also takes OTLP/HTTP trace exports (POST /v1/traces) and drops them, for `--tracing`.
import http from 'node:http';
import { parseArgs } from 'node:util';

const { values: a } = parseArgs({
  options: {
    port: { type: 'string', default: '0' },
    tokens: { type: 'string', default: '64' },
    'ttft-ms': { type: 'string', default: '0' },
    'itl-ms': { type: 'string', default: '1' },
  },
});
const TOKENS = Number(a.tokens);
const TTFT = Number(a['ttft-ms']);
const ITL = Number(a['itl-ms']);
const WORDS = ['the', ' quick', ' brown', ' fox', ' jumps', ' over', ' a', ' lazy', ' dog', '.'];

const wait = (ms: number) => new Promise<void>((r) => (ms > 0 ? setTimeout(r, ms) : setImmediate(r)));

interface Req {
  model?: string;
  stream?: boolean;
  max_tokens?: number;
  max_completion_tokens?: number;
  user?: string;
  stream_options?: { include_usage?: boolean };
  messages?: { content?: string }[];
}

const server = http.createServer((req, res) => {
  if (req.method === 'POST' && req.url === '/v1/traces') {
    req.resume();
    req.on('end', () => res.writeHead(200, { 'content-type': 'application/json' }).end('{}'));
    return;
  }
  if (req.method !== 'POST' || !req.url?.endsWith('/chat/completions')) {
    res
      .writeHead(404, { 'content-type': 'application/json' })
      .end('{"error":{"message":"not found","type":"invalid_request_error"}}');
    return;
  }
  let raw = '';
  req.setEncoding('utf8');
  req.on('data', (d) => (raw += d));
  req.on('end', () => void answer(JSON.parse(raw) as Req, res));
});

async function answer(body: Req, res: http.ServerResponse): Promise<void> {
  let closed = false;
  res.on('close', () => (closed = true));
  const tokens = Math.min(TOKENS, body.max_completion_tokens ?? body.max_tokens ?? TOKENS);
  const finish = tokens < TOKENS ? 'length' : 'stop';
  const ttft = /^ttft=(\d+)$/.exec(body.user ?? '')?.[1];
  const id = `chatcmpl-fake${Math.random().toString(36).slice(2, 10)}`;
  const created = Math.floor(Date.now() / 1000);
  const model = body.model ?? 'fake-model';
  const promptTokens = (body.messages ?? []).reduce((n, m) => n + Math.ceil((m.content ?? '').length / 4) + 3, 3);
  await wait(ttft ? Number(ttft) : TTFT);
  if (closed) return;
  if (!body.stream) {
    await wait(ITL * tokens);
    let content = '';
    for (let i = 0; i < tokens; i++) content += WORDS[i % WORDS.length];
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(
      JSON.stringify({
        id,
        object: 'chat.completion',
        created,
        model,
        choices: [{ index: 0, message: { role: 'assistant', content }, logprobs: null, finish_reason: finish }],
        usage: { prompt_tokens: promptTokens, completion_tokens: tokens, total_tokens: promptTokens + tokens },
      }),
    );
    return;
  }
  res.writeHead(200, { 'content-type': 'text/event-stream', 'cache-control': 'no-cache' });
  const head = `{"id":"${id}","object":"chat.completion.chunk","created":${created},"model":${JSON.stringify(model)},"choices":[`;
  for (let i = 0; i < tokens && !closed; i++) {
    const delta = i === 0 ? { role: 'assistant', content: WORDS[0] } : { content: WORDS[i % WORDS.length] };
    res.write(`data: ${head}${JSON.stringify({ index: 0, delta, finish_reason: null })}]}\n\n`);
    if (ITL > 0) await wait(ITL);
  }
  if (closed) return;
  res.write(`data: ${head}{"index":0,"delta":{},"finish_reason":"${finish}"}]}\n\n`);
  if (body.stream_options?.include_usage) {
    res.write(
      `data: ${head}],"usage":{"prompt_tokens":${promptTokens},"completion_tokens":${tokens},"total_tokens":${promptTokens + tokens}}}\n\n`,
    );
  }
  res.end('data: [DONE]\n\n');
}

server.keepAliveTimeout = 65_000;
server.listen(Number(a.port), '127.0.0.1', () => {
  const port = (server.address() as { port: number }).port;
  process.stdout.write(`fake upstream listening on http://127.0.0.1:${port}\n`);
  process.send?.({ port });
});
process.on('SIGTERM', () => process.exit(0));
