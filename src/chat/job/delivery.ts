import type { CompletionJob } from '../relay/completion-job.js';
import { WEB_PROCESS_GONE } from '../relay/liveness.js';
import type { RelayPublisher } from '../relay/publisher.js';
import { billedThrough, type Delivered } from './billable.js';

// What reached a job's client, read from what its web process acknowledged handing on
// (relay/acks.ts) and what its subscription took: at the end of an answer, never per token.

/** How long a stopped job waits for the replies of relay calls still out before it counts what was received. */
const RECEIPT_WAIT_MS = 1000;

/** How long the end of an answer waits for its web process's acknowledgement: as long as a take-over waits for a worker. */
const ackWaitMs = (livenessTtlMs: number): number => 4 * livenessTtlMs;

/**
 * What a job stopped for its web process's death delivered: each choice's text and tool calls up
 * to the message billedThrough names. A request none of whose answer reached its client delivered
 * nothing, like one whose client left before it began.
 */
export async function deliveredOnReceipt(
  publisher: RelayPublisher,
  job: Pick<CompletionJob, 'acks' | 'params'>,
): Promise<Delivered> {
  await publisher.settled(RECEIPT_WAIT_MS);
  try {
    const acks = job.acks === true;
    const through = billedThrough(acks, acks ? await publisher.webAcked() : undefined, publisher.received);
    if (through === 0) return 'none';
    return { choices: await publisher.choicesThrough(through, job.params.n ?? 1) };
  } catch {
    // The log could not be read (Redis away): what was produced is billed, rather than nothing.
    return 'all';
  }
}

/**
 * A stream whose answer is complete waits, before its record, until its web process has
 * acknowledged all of it but the last message, or is found gone (its job is then stopped and billed
 * like any other, deliveredOnReceipt). Otherwise a process that died holding the end of the answer
 * unwritten would have it billed in full. The client does not wait for this: the messages past
 * the acknowledgement are the ones its web process hands on with its next acknowledgement.
 * Bounded, for a process that neither acknowledges nor is found gone.
 */
export async function awaitWebTook(
  publisher: RelayPublisher,
  signal: AbortSignal,
  livenessTtlMs: number,
): Promise<void> {
  await publisher.flushNow();
  await publisher.settled(RECEIPT_WAIT_MS);
  await publisher.webTook(publisher.lastSeq - 1, signal, ackWaitMs(livenessTtlMs));
}

/**
 * A whole answer goes to its web process before its record, which waits until the process has
 * acknowledged it (it hands the answer to its client only then: relay/acks.ts) or is found gone.
 * A process that died without acknowledging it handed its client nothing, and nothing is billed,
 * as for a request whose client left before it began; recorded first, such an answer was billed
 * in full. Should this worker die in between, the take-over records it from the relay log
 * (take-over.ts). Says whether the client was handed the answer.
 */
export async function sendAhead(
  publisher: RelayPublisher,
  body: string,
  signal: AbortSignal,
  livenessTtlMs: number,
): Promise<boolean> {
  const seq = await publisher.sendEnd('final', body);
  await publisher.settled(RECEIPT_WAIT_MS);
  await publisher.webTook(seq, signal, ackWaitMs(livenessTtlMs));
  // Read again once the process is found gone: it may have taken the answer just before.
  return (
    !(signal.aborted && signal.reason === WEB_PROCESS_GONE) ||
    ((await publisher.webAcked().catch(() => seq)) ?? -1) >= seq
  );
}
