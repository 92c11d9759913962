import { checkRoles, checkToolCallArguments, unsupported } from '../upstream.js';
import type { CompletionParams } from '../types.js';

const PROVIDER = 'Gemini';
const ROLES = ['system', 'developer', 'user', 'assistant', 'tool'] as const;

/**
 * What Gemini models accept. A request the API would refuse is refused here instead (422
 * naming the field), before anything is queued; the local model applies the same rules offline.
 */
export function checkGeminiRequest(p: CompletionParams): void {
  checkRoles(p.messages, ROLES, PROVIDER);
  if (!p.messages.some((m) => m.role === 'user' || m.role === 'assistant')) {
    throw unsupported('messages', 'Gemini models need at least one user or assistant message besides system messages', [
      'messages',
    ]);
  }
  if (p.logit_bias !== undefined && Object.keys(p.logit_bias).length > 0)
    throw unsupported('logit_bias', 'logit_bias is not supported by Gemini models');
  checkToolCallArguments(p.messages, PROVIDER);
  // The Gemini API reads images inline; it fetches no URL but its own file store's.
  p.messages.forEach((m, i) => {
    if (!Array.isArray(m.content)) return;
    m.content.forEach((part, j) => {
      if (part.type === 'image_url' && !part.image_url.url.startsWith('data:'))
        throw unsupported(
          'messages',
          'Gemini models take images as data URLs (data:image/png;base64,…), not as URLs to fetch',
          ['messages', i, 'content', j, 'image_url', 'url'],
        );
    });
  });
  if (p.seed !== undefined && (p.seed < -(2 ** 31) || p.seed >= 2 ** 31))
    throw unsupported('seed', 'Gemini models take a seed from -2147483648 to 2147483647');
}
