// Server-sent events as this service writes them, in one place: the worker frames chunks (it
// publishes ready-to-write bytes, so the web tier writes them without parsing), and the web tier
// frames what only it can say (the end, an error after the stream started, heartbeats).
//
// Every event carries `id: <n>`, its sequence number in the stream (1, 2, 3, …), so a client that
// loses the connection resumes after the last one it has (Last-Event-ID). The worker numbers the
// chunks as it frames them; the web tier numbers the events it adds (the error event, [DONE])
// after the last number it wrote. Each event begins with its id line and a chunk's JSON never
// holds a raw newline, so an event boundary is exactly `\n\n` followed by `id: `.

import type { CompletionJob } from '../relay/completion-job.js';

export const HEARTBEAT = ': keep-alive\n\n';

/** One event with its sequence number. */
export const withEventId = (id: number, event: string): string => `id: ${id}\n${event}`;

/** The end of a stream, numbered after the event before it. */
export const doneEvent = (id: number): string => withEventId(id, 'data: [DONE]\n\n');

/** An error after the stream has started: an event clients (and the OpenAI SDK) read as an error. */
export function errorEvent(
  id: number,
  error: { message: string; type: string; code: string | null; param: string | null },
): string {
  return withEventId(
    id,
    `data: ${JSON.stringify({ error: { message: error.message, type: error.type, code: error.code, param: error.param } })}\n\n`,
  );
}

/** What the web tier writes itself at a stream's end, per wire format. */
export interface StreamEnding {
  /** After a completed stream's last events: chat's [DONE]; nothing for the Responses API. */
  end(id: number): string;
  /** An error once the stream has started, and whatever must follow it. */
  error(id: number, error: { message: string; type: string; code: string | null; param: string | null }): string;
}

export const CHAT_ENDING: StreamEnding = {
  end: doneEvent,
  error: (id, error) => errorEvent(id, error) + doneEvent(id + 1),
};

/**
 * The Responses API's streams end with their last event, no [DONE]. An error the web tier finds
 * (the relay broke off, the worker went silent) is OpenAI's `error` event; the worker's own
 * failures end with its response.failed instead (RelayError.events).
 */
export const RESPONSES_ENDING: StreamEnding = {
  end: () => '',
  error: (id, error) =>
    withEventId(
      id,
      `event: error\ndata: ${JSON.stringify({ type: 'error', code: error.code, message: error.message, param: error.param, sequence_number: id - 1 })}\n\n`,
    ),
};

const ID_LINE = 'id: ';

function idAt(events: string, at: number): number | undefined {
  if (!events.startsWith(ID_LINE, at)) return undefined;
  const end = events.indexOf('\n', at);
  const id = Number(events.slice(at + ID_LINE.length, end));
  return Number.isSafeInteger(id) ? id : undefined;
}

/** The sequence number of the last event in a run of events (undefined when none carries one). */
export function lastEventIdIn(events: string): number | undefined {
  const boundary = events.lastIndexOf(`\n\n${ID_LINE}`);
  return idAt(events, boundary < 0 ? 0 : boundary + 2);
}

/** The events of a run whose sequence number is above `after` (ids rise within a run). */
export function eventsAfter(events: string, after: number): string {
  for (let at = 0; at < events.length;) {
    const id = idAt(events, at);
    if (id !== undefined && id > after) return at === 0 ? events : events.slice(at);
    const end = events.indexOf('\n\n', at);
    if (end < 0) break;
    at = end + 2;
  }
  return '';
}

export interface ChunkFramer {
  /** One `chat.completion.chunk` event carrying one choice's delta. */
  chunk(choice: object): string;
  /** The last chunk of a stream that asked for usage: no choices, the usage. */
  usage(usage: object): string;
}

/**
 * Frames a request's chunks. The head every chunk shares is serialised once per request; OpenAI's
 * schema has system_fingerprint as an optional string, never null, so it is left out when the
 * provider names none.
 */
export function chunkFramer(
  job: Pick<CompletionJob, 'id' | 'created' | 'model' | 'includeUsage'>,
  fingerprint: string | undefined,
): ChunkFramer {
  const fingerprintField = fingerprint === undefined ? '' : `"system_fingerprint":${JSON.stringify(fingerprint)},`;
  const head = `{"id":${JSON.stringify(job.id)},"object":"chat.completion.chunk","created":${job.created},"model":${JSON.stringify(job.model.id)},${fingerprintField}"choices":[`;
  const tail = job.includeUsage ? '],"usage":null}\n\n' : ']}\n\n';
  return {
    chunk: (choice) => `data: ${head}${JSON.stringify(choice)}${tail}`,
    usage: (usage) => `data: ${head}],"usage":${JSON.stringify(usage)}}\n\n`,
  };
}

/** The `data:` payloads of a run of ready-to-write events (what the relay log holds). */
export function eventData(events: string): string[] {
  const out: string[] = [];
  for (const event of events.split('\n\n')) {
    const data = event.split('\n').find((line) => line.startsWith('data: '));
    if (data) out.push(data.slice(6));
  }
  return out;
}
