// The image's HEALTHCHECK: the web role's liveness (GET /health/live on PORT), with no shell, curl
// or wget in the image. Exits 0 when the process answers, 1 otherwise. Worker and scheduler
// containers answer the same path on their metrics port: run it with HEALTH_PORT set to that port.
const port = process.env.HEALTH_PORT || process.env.PORT || '8080';
const timeout = AbortSignal.timeout(Number(process.env.HEALTH_TIMEOUT_MS || 3000));
fetch(`http://127.0.0.1:${port}/health/live`, { signal: timeout }).then(
  (r) => process.exit(r.ok ? 0 : 1),
  () => process.exit(1),
);
