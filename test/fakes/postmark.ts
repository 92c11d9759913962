import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { randomUUID } from 'node:crypto';

/** A message as Postmark's POST /email receives it (the fields we send). */
export interface PostmarkMessage {
  From: string;
  To: string;
  Subject: string;
  HtmlBody?: string;
  TextBody?: string;
  MessageStream?: string;
  Tag?: string;
  /** Set by the fake: the MessageID it answered with (absent for refused requests). */
  MessageID?: string;
}

export interface PostmarkRequest {
  token: string | undefined;
  body: PostmarkMessage;
  /** What the fake did with it. */
  outcome: 'accepted' | 'failed' | 'hung';
}

type Failure = { status: number; errorCode: number; message: string };

/** The error bodies Postmark answers with, by HTTP status. */
const FAILURES: Record<number, Failure> = {
  401: { status: 401, errorCode: 10, message: 'Request does not contain a valid Server token.' },
  422: { status: 422, errorCode: 300, message: "Invalid 'To' address: 'nobody'." },
  429: { status: 429, errorCode: 0, message: 'Rate limit exceeded.' },
  500: { status: 500, errorCode: 0, message: 'Internal server error.' },
  503: { status: 503, errorCode: 0, message: 'Service unavailable.' },
};

/**
 * A local stand-in for Postmark's Email API (POST /email) speaking its wire format: the
 * X-Postmark-Server-Token header, the PascalCase JSON message, the {To, SubmittedAt, MessageID,
 * ErrorCode, Message} answer and Postmark's error bodies. The real `postmark` client talks to it
 * through POSTMARK_API_BASE. A test can make it fail or hang for given recipients.
 */
export class FakePostmark {
  readonly requests: PostmarkRequest[] = [];
  private server: http.Server | undefined;
  private readonly sockets = new Set<Socket>();
  private readonly hung = new Set<http.ServerResponse>();
  private readonly failures = new Map<string, { remaining: number; failure: Failure }>();
  private readonly hangFor = new Set<string>();
  url = '';

  constructor(readonly serverToken = 'fake-postmark-server-token') {}

  async start(): Promise<this> {
    this.server = http.createServer((req, res) => void this.handle(req, res));
    this.server.on('connection', (s) => {
      this.sockets.add(s);
      s.once('close', () => this.sockets.delete(s));
    });
    await new Promise<void>((resolve) => this.server!.listen(0, '127.0.0.1', resolve));
    this.url = `http://127.0.0.1:${(this.server.address() as AddressInfo).port}`;
    return this;
  }

  /** The environment that points the service's Postmark transport here. */
  env(): Record<string, string> {
    return { MAIL_TRANSPORT: 'postmark', POSTMARK_SERVER_TOKEN: this.serverToken, POSTMARK_API_BASE: this.url };
  }

  /** The next `times` sends to `to` fail with Postmark's answer for `status` (401, 422, 429, 500, 503). */
  failFor(to: string, times: number, status = 500): void {
    const failure = FAILURES[status];
    if (!failure) throw new Error(`no canned Postmark failure for ${status}`);
    this.failures.set(to.toLowerCase(), { remaining: times, failure });
  }

  /** Sends to `to` get no answer until release() or close(): a provider that hangs. */
  hang(to: string): void {
    this.hangFor.add(to.toLowerCase());
  }

  /** Stops hanging and drops the held requests (the client sees a broken connection). */
  release(): void {
    this.hangFor.clear();
    for (const res of this.hung) res.socket?.destroy();
    this.hung.clear();
  }

  /** Messages Postmark accepted for that address (any case). */
  accepted(to: string): PostmarkMessage[] {
    return this.requests
      .filter((r) => r.outcome === 'accepted' && r.body.To.toLowerCase() === to.toLowerCase())
      .map((r) => r.body);
  }

  /** Every request for that address, whatever happened to it. */
  attempts(to: string): PostmarkRequest[] {
    return this.requests.filter((r) => r.body.To.toLowerCase() === to.toLowerCase());
  }

  async close(): Promise<void> {
    this.release();
    for (const s of this.sockets) s.destroy();
    const server = this.server;
    this.server = undefined;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }

  private async handle(req: http.IncomingMessage, res: http.ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const send = (status: number, body: unknown) => {
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8' });
      res.end(JSON.stringify(body));
    };
    if (req.method !== 'POST' || req.url !== '/email') {
      send(404, { ErrorCode: 404, Message: `Unknown endpoint ${req.method} ${req.url}` });
      return;
    }
    const token = req.headers['x-postmark-server-token'] as string | undefined;
    let body: PostmarkMessage;
    try {
      body = JSON.parse(Buffer.concat(chunks).toString('utf8')) as PostmarkMessage;
    } catch {
      send(422, { ErrorCode: 402, Message: 'Received invalid JSON input.' });
      return;
    }
    const record: PostmarkRequest = { token, body, outcome: 'failed' };
    this.requests.push(record);
    if (token !== this.serverToken) {
      send(401, { ErrorCode: 10, Message: FAILURES[401]!.message });
      return;
    }
    if (
      req.headers.accept !== 'application/json' ||
      !String(req.headers['content-type']).startsWith('application/json')
    ) {
      send(415, { ErrorCode: 0, Message: 'Accept and Content-Type must be application/json' });
      return;
    }
    const to = String(body.To ?? '').toLowerCase();
    if (!body.From || !to || !body.Subject || (!body.HtmlBody && !body.TextBody)) {
      send(422, { ErrorCode: 300, Message: 'Invalid email request: From, To, Subject and a body are required.' });
      return;
    }
    // Addresses go to Postmark in ASCII: an internationalised domain as punycode (no SMTPUTF8).
    // eslint-disable-next-line no-control-regex
    if (/[^\u0000-\u007f]/.test(body.To)) {
      send(422, { ErrorCode: 300, Message: `Invalid 'To' address: '${body.To}'.` });
      return;
    }
    if (this.hangFor.has(to)) {
      record.outcome = 'hung';
      this.hung.add(res);
      return;
    }
    const failing = this.failures.get(to);
    if (failing && failing.remaining > 0) {
      failing.remaining--;
      send(failing.failure.status, { ErrorCode: failing.failure.errorCode, Message: failing.failure.message });
      return;
    }
    record.outcome = 'accepted';
    const messageId = randomUUID();
    body.MessageID = messageId;
    send(200, {
      To: body.To,
      SubmittedAt: new Date().toISOString(),
      MessageID: messageId,
      ErrorCode: 0,
      Message: 'OK',
    });
  }
}
