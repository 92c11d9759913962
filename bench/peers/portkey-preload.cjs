// Loaded with `node --require` into Portkey's gateway when the benchmark runs it as a peer.
// On Node 20 its streaming path fails with `TypeError: immutable` (Portkey issues #1389 and
// #1550): it sets headers on the Response that `fetch` returned, whose headers are immutable.
// Handing it each response again with a mutable copy of its headers lets it run unchanged; the
// body is the same stream, not a copy, so this adds no work per chunk.
'use strict';
const upstreamFetch = globalThis.fetch;
globalThis.fetch = async function fetchWithMutableHeaders(...args) {
  const res = await upstreamFetch(...args);
  return new Response(res.body, { status: res.status, statusText: res.statusText, headers: new Headers(res.headers) });
};
