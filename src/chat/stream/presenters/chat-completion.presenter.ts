// A chat completion on the wire: `chat.completion.chunk` events for a stream (the usage chunk last,
// when asked for), one `chat.completion` body otherwise. [DONE] and a late error event are the web
// tier's to write (sse.ts).
import { messageOf } from '../choices.js';
import type { CompletionJob } from '../../relay/completion-job.js';
import type { RelayPublisher } from '../../relay/publisher.js';
import { chunkFramer } from '../sse.js';
import type { AnswerPresenter } from './answer-presenter.js';

export function chatCompletionPresenter(
  job: CompletionJob,
  fingerprint: string | undefined,
  publisher: RelayPublisher,
): AnswerPresenter {
  const framer = chunkFramer(job, fingerprint);
  const chunk = (index: number, delta: object, finishReason: string | null, urgent = true) =>
    publisher.sse(framer.chunk({ index, delta, logprobs: null, finish_reason: finishReason }), urgent);
  return {
    finalObject: () => undefined,
    text(index, choice, content) {
      const first = !choice.started;
      choice.started = true;
      chunk(index, first ? { role: 'assistant', content } : { content }, null, first);
    },
    toolCall(index, _choice, _ev, delta, first) {
      chunk(index, delta, null, first);
    },
    finish(index, choice) {
      const delta = choice.started ? {} : { role: 'assistant', content: '' };
      choice.started = true;
      chunk(index, delta, choice.finish);
    },
    done: (_choices, usage) => (job.includeUsage ? publisher.numbered(framer.usage(usage)) : ''),
    body: (choices, usage) =>
      JSON.stringify({
        id: job.id,
        object: 'chat.completion',
        created: job.created,
        model: job.model.id,
        ...(fingerprint === undefined ? {} : { system_fingerprint: fingerprint }),
        // OpenAI's schema requires `refusal` (null when none); a provider's refusal shows as finish_reason content_filter.
        choices: choices.map((c, index) => ({
          index,
          message: messageOf(c),
          logprobs: null,
          finish_reason: c.finish ?? 'stop',
        })),
        usage,
      }),
    errorPayload: (error) => JSON.stringify(error),
  };
}
