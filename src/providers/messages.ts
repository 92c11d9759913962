// Reading a message's content, whichever form it came in: a string, or content parts.
import type { ChatMessage, ContentPart } from './types.js';

/** The text of a message: its string content, or its text parts joined. */
export function textOf(content: ChatMessage['content']): string {
  if (content === null) return '';
  if (typeof content === 'string') return content;
  let text = '';
  for (const part of content) if (part.type === 'text') text += part.text;
  return text;
}

/** The image parts of a message's content. */
export function imagesOf(content: ChatMessage['content']): Extract<ContentPart, { type: 'image_url' }>[] {
  if (content === null || typeof content === 'string') return [];
  return content.filter((p): p is Extract<ContentPart, { type: 'image_url' }> => p.type === 'image_url');
}

/**
 * The characters a message carries, as the 50,000-character bound counts them: its text, each
 * image URL (a data URL whole), and each tool call's id, name and arguments. Code points, as JSON
 * Schema's maxLength counts.
 */
export function messageChars(m: {
  content:
    string | readonly ({ type: 'text'; text: string } | { type: 'image_url'; image_url: { url: string } })[] | null;
  tool_calls?: ChatMessage['tool_calls'];
}): number {
  let chars = 0;
  const count = (s: string) => (chars += [...s].length);
  if (typeof m.content === 'string') count(m.content);
  else if (m.content !== null) {
    for (const part of m.content) count(part.type === 'text' ? part.text : part.image_url.url);
  }
  for (const call of m.tool_calls ?? []) {
    count(call.id);
    count(call.function.name);
    count(call.function.arguments);
  }
  return chars;
}

/** Image types every provider that takes images accepts. */
export const IMAGE_TYPES = ['image/png', 'image/jpeg', 'image/gif', 'image/webp'] as const;

const DATA_URL = /^data:(image\/[a-z0-9.+-]+);base64,([A-Za-z0-9+/]*={0,2})$/i;

/** The media type and base64 data of an image data URL; undefined for anything else. */
export function parseDataUrl(url: string): { mediaType: string; data: string } | undefined {
  const m = DATA_URL.exec(url);
  return m ? { mediaType: m[1]!.toLowerCase(), data: m[2]! } : undefined;
}
