import { expect } from 'chai';
import {
  CompletionStream,
  type CompletionEvent,
  type EndReason,
  type LogRead,
  type StreamState,
} from '../../src/chat/stream/completion-stream.js';
import { AppError } from '../../src/errors.js';

// The stream's own state machine, without a source behind it: the live and the resumed
// completion are tested with their sources in test/integration/completion-stream.test.ts.

const turn = () => new Promise((r) => setImmediate(r));

function streamWithOwner(initial?: StreamState) {
  const ends: { reason: EndReason; was: StreamState; last: CompletionEvent | undefined }[] = [];
  const stream = new CompletionStream(
    'chatcmpl-test',
    undefined,
    { ended: (reason, was, last) => ends.push({ reason, was, last }) },
    initial,
  );
  return { stream, ends };
}

async function readAll(stream: CompletionStream): Promise<CompletionEvent[]> {
  const events: CompletionEvent[] = [];
  for await (const e of stream) events.push(e);
  return events;
}

describe('a completion stream', () => {
  it('starts queued and runs from its first event', () => {
    const { stream } = streamWithOwner();
    expect(stream.state).to.equal('queued');
    stream.push({ kind: 'picked' });
    expect(stream.state).to.equal('running');
  });

  it('gives its events in order, then the last event its source ended it with, then stops', async () => {
    const { stream } = streamWithOwner();
    stream.push({ kind: 'picked' });
    stream.push({ kind: 'events', payload: 'id: 1\ndata: a\n\n' });
    stream.end('completed', { kind: 'done', payload: '', lastEventId: 1 });
    stream.push({ kind: 'events', payload: 'id: 2\ndata: late\n\n' });
    expect(await readAll(stream)).to.deep.equal([
      { kind: 'picked' },
      { kind: 'events', payload: 'id: 1\ndata: a\n\n' },
      { kind: 'done', payload: '', lastEventId: 1 },
    ]);
    expect(stream.state).to.equal('ended');
    expect(stream.endReason).to.equal('completed');
  });

  it('tells its owner once, with the reason, the state it ended from and the last event', () => {
    const { stream, ends } = streamWithOwner();
    stream.push({ kind: 'picked' });
    const last: CompletionEvent = {
      kind: 'error',
      error: new AppError('upstream', 'x'),
      lastEventId: 0,
      started: false,
    };
    stream.end('silence', last);
    stream.end('client_left');
    expect(ends).to.deep.equal([{ reason: 'silence', was: 'running', last }]);
    expect(stream.endReason).to.equal('silence');
  });

  it('ended by its reader while queued, tells its owner it was queued', () => {
    const { stream, ends } = streamWithOwner();
    stream.end();
    expect(ends).to.deep.equal([{ reason: 'client_left', was: 'queued', last: undefined }]);
  });

  it('wakes a reader waiting for the next event when its source ends it', async () => {
    const { stream } = streamWithOwner();
    const read = readAll(stream);
    await turn();
    stream.end('relay_gap', { kind: 'error', error: new AppError('upstream', 'lost'), lastEventId: 0, started: false });
    expect((await read).map((e) => e.kind)).to.deep.equal(['error']);
  });

  it('ended by its reader, drops what was not read and frees a source waiting on it', async () => {
    const { stream } = streamWithOwner('running');
    let freed = false;
    stream.push({ kind: 'events', payload: 'id: 1\ndata: a\n\n' }, () => (freed = true));
    stream.end('client_left');
    await turn();
    expect(freed).to.equal(true);
    expect(await readAll(stream)).to.deep.equal([]);
  });

  it('lets a source that waits on push go on only once the reader asks for the next event', async () => {
    const { stream } = streamWithOwner('running');
    let taken = false;
    stream.push({ kind: 'events', payload: 'page 1' }, () => (taken = true));
    const reader = stream[Symbol.asyncIterator]();
    expect((await reader.next()).value).to.deep.equal({ kind: 'events', payload: 'page 1' });
    await turn();
    expect(taken, 'taken while the reader still writes it').to.equal(false);
    const next = reader.next();
    await turn();
    expect(taken).to.equal(true);
    stream.end('completed', { kind: 'done', payload: '', lastEventId: 1 });
    expect((await next).value).to.deep.equal({ kind: 'done', payload: '', lastEventId: 1 });
  });

  it('ends as client_left when its reader stops reading before the end', async () => {
    const { stream, ends } = streamWithOwner();
    stream.push({ kind: 'picked' });
    stream.push({ kind: 'events', payload: 'x' });
    for await (const e of stream) if (e.kind === 'picked') break;
    expect(stream.endReason).to.equal('client_left');
    expect(ends.map((e) => [e.reason, e.was])).to.deep.equal([['client_left', 'running']]);
  });

  it('is read once', async () => {
    const { stream } = streamWithOwner();
    stream.end('completed', { kind: 'final', body: '{}' });
    await readAll(stream);
    let thrown: unknown;
    try {
      await readAll(stream);
    } catch (err) {
      thrown = err;
    }
    expect(thrown).to.be.instanceOf(Error);
  });
});

describe('a completion stream read from a relay log (fromLog)', () => {
  const log = { warn: () => undefined };

  function fromLog(read: (signal: AbortSignal) => LogRead) {
    const ends: EndReason[] = [];
    const stream = CompletionStream.fromLog('chatcmpl-test', read, { ended: (reason) => ends.push(reason) }, log);
    return { stream, ends };
  }

  it('starts reading the log only when its reader begins, running', async () => {
    let opened = 0;
    const { stream } = fromLog(async function* () {
      opened++;
      yield { kind: 'caught_up' };
      return { reason: 'completed', last: { kind: 'done', payload: '', lastEventId: 0 } };
    });
    expect(stream.state).to.equal('running');
    await turn();
    expect(opened).to.equal(0);
    await readAll(stream);
    expect(opened).to.equal(1);
  });

  it("gives the log's events, then ends as the log says it ended", async () => {
    const { stream, ends } = fromLog(async function* () {
      yield { kind: 'events', payload: 'id: 2\ndata: b\n\n' };
      yield { kind: 'caught_up' };
      return { reason: 'completed', last: { kind: 'done', payload: '', lastEventId: 2 } };
    });
    expect(await readAll(stream)).to.deep.equal([
      { kind: 'events', payload: 'id: 2\ndata: b\n\n' },
      { kind: 'caught_up' },
      { kind: 'done', payload: '', lastEventId: 2 },
    ]);
    expect(ends).to.deep.equal(['completed']);
  });

  it('reads the next page of the log only once the reader has taken the one before', async () => {
    const asked: number[] = [];
    const { stream } = fromLog(async function* () {
      for (let page = 1; page <= 3; page++) {
        asked.push(page);
        yield { kind: 'events', payload: `page ${page}` };
      }
      return { reason: 'completed', last: { kind: 'done', payload: '', lastEventId: 3 } };
    });
    const reader = stream[Symbol.asyncIterator]();
    await reader.next();
    await turn();
    expect(asked).to.deep.equal([1]);
    await reader.next();
    await turn();
    expect(asked).to.deep.equal([1, 2]);
    await reader.return(undefined);
  });

  it('aborts the read and stops it when its reader leaves', async () => {
    let aborted = false;
    let stopped = false;
    const { stream, ends } = fromLog(async function* (signal) {
      signal.addEventListener('abort', () => (aborted = true));
      try {
        for (;;) yield { kind: 'events', payload: 'x' };
      } finally {
        stopped = true;
      }
    });
    for await (const e of stream) if (e.kind === 'events') break;
    await turn();
    expect(ends).to.deep.equal(['client_left']);
    expect(aborted).to.equal(true);
    expect(stopped).to.equal(true);
  });

  it('ends as redis_down with a 503 when the log cannot be read before anything was sent', async () => {
    const { stream, ends } = fromLog(async function* () {
      yield* [];
      throw new Error('connection refused');
    });
    const events = await readAll(stream);
    expect(ends).to.deep.equal(['redis_down']);
    expect(events.map((e) => e.kind === 'error' && e.error.status)).to.deep.equal([503]);
  });

  it('ends as redis_down with a lost relay when the log cannot be read after events were sent', async () => {
    const { stream } = fromLog(async function* () {
      yield { kind: 'events', payload: 'x' };
      throw new Error('connection refused');
    });
    const events = await readAll(stream);
    const last = events.at(-1);
    expect(last?.kind === 'error' && last.error.code).to.equal('relay_interrupted');
  });
});
