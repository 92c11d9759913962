import type { Provider } from '../../../providers/types.js';
import type { CompletionJob } from '../../relay/completion-job.js';
import type { RelayPublisher } from '../../relay/publisher.js';
import type { AnswerPresenter } from './answer-presenter.js';
import { chatCompletionPresenter } from './chat-completion.presenter.js';
import { responsePresenter } from './response.presenter.js';

/** The presenter of the wire format the job asks for: chat completions unless it says otherwise. */
export function presenterFor(
  job: CompletionJob,
  provider: Pick<Provider, 'fingerprint'>,
  publisher: RelayPublisher,
): AnswerPresenter {
  return job.wire?.format === 'responses'
    ? responsePresenter(job, publisher)
    : chatCompletionPresenter(job, provider.fingerprint, publisher);
}
