/** Escapes a value for HTML text or a quoted attribute (email bodies are built here, outside the web edge). */
export function escapeText(s: string): string {
  return s.replace(/[&<>"']/g, (c) => ({ '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;' })[c]!);
}
