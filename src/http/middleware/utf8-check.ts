/**
 * The first query parameter whose name or value is not valid UTF-8 once percent-decoded, or
 * undefined. Node's query parser would replace such bytes with U+FFFD, as the body parser does.
 */
export function badlyEncodedQueryParam(querystring: string): string | undefined {
  if (querystring === '') return undefined;
  for (const part of querystring.split('&')) {
    const [rawKey = '', rawValue = ''] = part.split('=', 2);
    const strict = (s: string) => decodeURIComponent(s.replace(/\+/g, ' '));
    try {
      strict(rawKey);
      strict(rawValue);
    } catch {
      try {
        return strict(rawKey);
      } catch {
        return rawKey;
      }
    }
  }
  return undefined;
}
