// Server-sent events as this service writes them, in one place: the worker frames chunks (it
// publishes ready-to-write bytes, so the web tier writes them without parsing), and the web tier
// frames what only it can say (the end, an error after the stream started, heartbeats).

import type { CompletionJob } from './completion-job.js';

export const DONE = 'data: [DONE]\n\n';
export const HEARTBEAT = ': keep-alive\n\n';

/** An error after the stream has started: an event clients (and the OpenAI SDK) read as an error. */
export function errorEvent(error: { message: string; type: string; code: string | null; param: string | null }): string {
  return `data: ${JSON.stringify({ error: { message: error.message, type: error.type, code: error.code, param: error.param } })}\n\n`;
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
export function chunkFramer(job: Pick<CompletionJob, 'id' | 'created' | 'model' | 'includeUsage'>, fingerprint: string | undefined): ChunkFramer {
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
