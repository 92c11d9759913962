// The Kubernetes manifests (deploy/kubernetes) and compose.yaml, read as an operator's tools read
// them: kustomize renders an overlay, each document is checked against the Kubernetes OpenAPI
// schema of its kind (kubernetes-models, offline), and what must agree with the service's own
// configuration (ports, probe paths, grace periods, the metrics the autoscalers read) is compared
// with what the service does with the same settings.
import { execFile } from 'node:child_process';
import { readdirSync } from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';
import { parseAllDocuments } from 'yaml';
import { ScaledObject } from '@kubernetes-models/keda/keda.sh/v1alpha1';
import { ConfigMap, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment } from 'kubernetes-models/apps/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { Job } from 'kubernetes-models/batch/v1';
import { Ingress, NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { loadConfig, supervisorSettings } from '../../src/config.js';
import { allRoutes } from '../../src/http/routes/index.js';
import { LIVENESS_PATH } from '../../src/metrics-server.js';
import { createMetrics } from '../../src/metrics.js';

export const KUBERNETES_DIR = path.resolve('deploy', 'kubernetes');

/** A rendered document: every manifest has these; the rest is read where it is checked. */
export type Manifest = {
  apiVersion: string;
  kind: string;
  metadata: { name: string; [field: string]: any };
  [field: string]: any;
};

/** The schema of each kind the manifests use. A kind missing here fails the test that renders it. */
const MODELS: Record<string, { new (data: never): { validate(): void } }> = {
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'v1/ServiceAccount': ServiceAccount,
  'apps/v1/Deployment': Deployment,
  'batch/v1/Job': Job,
  'autoscaling/v2/HorizontalPodAutoscaler': HorizontalPodAutoscaler,
  'networking.k8s.io/v1/Ingress': Ingress,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'keda.sh/v1alpha1/ScaledObject': ScaledObject,
};

/** The base and every overlay, as directories kustomize renders. */
export function kustomizations(): string[] {
  const overlays = path.join(KUBERNETES_DIR, 'overlays');
  return [
    path.join(KUBERNETES_DIR, 'base'),
    ...readdirSync(overlays)
      .sort()
      .map((o) => path.join(overlays, o)),
  ];
}

/** `kubectl kustomize dir`, parsed. */
export async function render(dir: string): Promise<Manifest[]> {
  const { stdout } = await promisify(execFile)('kubectl', ['kustomize', dir], { maxBuffer: 16 * 1024 * 1024 });
  return parseAllDocuments(stdout).map((d) => d.toJS() as Manifest);
}

/** What the Kubernetes OpenAPI schema says is wrong with a document, or undefined. */
export function schemaError(doc: Manifest): string | undefined {
  const Model = MODELS[`${doc.apiVersion}/${doc.kind}`];
  if (!Model) return `${doc.kind} ${doc.metadata.name}: no schema for ${doc.apiVersion} ${doc.kind}`;
  try {
    new Model(doc as never).validate();
    return undefined;
  } catch (err) {
    return `${doc.kind} ${doc.metadata.name}: ${(err as Error).message}`;
  }
}

/** Stand-ins for what the manifests take from the secret chat-api-secrets, so the config loads. */
const SECRET_STAND_INS = {
  DATABASE_URL: 'postgres://chat@postgres:5432/chat',
  REDIS_URL: 'redis://redis:6379',
  JWT_SECRET: 'x'.repeat(32),
  POSTMARK_SERVER_TOKEN: 'stand-in',
};

/** The environment a role's container gets: the ConfigMap, the secret's stand-ins, its own env. */
function containerEnv(docs: Manifest[], container: Manifest): Record<string, string> {
  const env: Record<string, string> = {};
  for (const from of container.envFrom ?? []) {
    if (from.configMapRef) {
      const map = docs.find((d) => d.kind === 'ConfigMap' && d.metadata.name === from.configMapRef.name);
      Object.assign(env, map?.data ?? {});
    }
    if (from.secretRef) {
      const { REDIS_URL, ...rest } = SECRET_STAND_INS;
      // An operator's secret for a Redis Cluster carries no REDIS_URL (one or the other).
      Object.assign(env, rest, env.REDIS_CLUSTER_NODES ? {} : { REDIS_URL });
    }
  }
  for (const e of container.env ?? []) if (e.value !== undefined) env[e.name] = String(e.value);
  return env;
}

const seconds = (ms: number) => Math.ceil(ms / 1000);

function preStopSeconds(container: Manifest): number {
  const hook = container.lifecycle?.preStop;
  if (!hook) return 0;
  if (hook.sleep) return Number(hook.sleep.seconds);
  const [cmd, arg] = hook.exec?.command ?? [];
  return cmd === 'sleep' ? Number(arg) : 0;
}

/** The container port a probe or Service names (by name or number). */
function portNumber(container: Manifest, port: string | number): number | undefined {
  if (typeof port === 'number') return port;
  return (container.ports ?? []).find((p: Manifest) => p.name === port)?.containerPort;
}

const ROLES = ['web', 'worker', 'scheduler', 'migrate'] as const;
type Role = (typeof ROLES)[number];
const isRole = (arg: unknown): arg is Role => ROLES.includes(arg as Role);

/** Every metric the service's registry exports, by name (one registry, made on first use). */
let exported: Set<string> | undefined;
const metricNames = () =>
  (exported ??= new Set(
    createMetrics('manifests')
      .registry.getMetricsAsArray()
      .map((m) => m.name),
  ));

/**
 * Everything in rendered manifests that disagrees with how the service runs on the same settings:
 * empty when they agree. Each line names the document and what is wrong.
 */
export function disagreements(docs: Manifest[]): string[] {
  const out: string[] = [];
  const webPaths = new Set(
    allRoutes(() => ({}))
      .filter((r) => r.method === 'get')
      .map((r) => r.path),
  );
  const workloads = docs.filter((d) => d.kind === 'Deployment' || d.kind === 'Job');
  for (const w of workloads) {
    const pod = w.spec.template.spec;
    for (const c of pod.containers as Manifest[]) {
      const where = `${w.kind} ${w.metadata.name}, container ${c.name}`;
      const role = (c.args ?? [])[0];
      if (!isRole(role)) {
        out.push(
          `${where}: args ${JSON.stringify(c.args)} name no role of the image (web, worker, scheduler, migrate)`,
        );
        continue;
      }
      const env = containerEnv(docs, c);
      let config;
      try {
        config = loadConfig(env);
      } catch (err) {
        out.push(`${where}: the service refuses its configuration: ${(err as Error).message}`);
        continue;
      }
      const { killAfterMs } = supervisorSettings(env);
      if (role !== 'migrate') {
        // SIGTERM comes after preStop; the process then has SHUTDOWN_TIMEOUT_MS to drain and its
        // own grace to close; the pod's grace period must outlast both, or streams are cut.
        const needed = preStopSeconds(c) + seconds(killAfterMs);
        const grace = pod.terminationGracePeriodSeconds ?? 30;
        if (grace < needed)
          out.push(
            `${where}: terminationGracePeriodSeconds ${grace} is shorter than preStop ${preStopSeconds(c)} s + SHUTDOWN_TIMEOUT_MS ${config.http.shutdownTimeoutMs} ms + the process's own ${seconds(killAfterMs - config.http.shutdownTimeoutMs)} s (${needed} s)`,
          );
      }
      const listens =
        role === 'web'
          ? { port: config.http.port, paths: webPaths, what: 'PORT' }
          : role === 'worker'
            ? {
                port: config.worker.metricsPort,
                paths: new Set([LIVENESS_PATH, '/metrics']),
                what: 'WORKER_METRICS_PORT',
              }
            : role === 'scheduler'
              ? {
                  port: config.scheduler.metricsPort,
                  paths: new Set([LIVENESS_PATH, '/metrics']),
                  what: 'SCHEDULER_METRICS_PORT',
                }
              : undefined;
      for (const p of c.ports ?? [])
        if (listens && p.containerPort !== listens.port)
          out.push(`${where}: containerPort ${p.containerPort} (${p.name}) is not ${listens.what} ${listens.port}`);
      for (const kind of ['startupProbe', 'livenessProbe', 'readinessProbe'] as const) {
        const probe = c[kind]?.httpGet;
        if (!probe) continue;
        if (!listens) {
          out.push(`${where}: ${kind} on a role that listens on no port`);
          continue;
        }
        const port = portNumber(c, probe.port);
        if (port !== listens.port)
          out.push(`${where}: ${kind} asks port ${probe.port} (${port}), not ${listens.what} ${listens.port}`);
        if (!listens.paths.has(probe.path))
          out.push(`${where}: ${kind} asks ${probe.path}, which the ${role} does not serve`);
        if (kind === 'livenessProbe' && probe.path !== LIVENESS_PATH)
          out.push(
            `${where}: livenessProbe asks ${probe.path}: only ${LIVENESS_PATH} leaves Postgres and Redis out, so an outage does not restart the pods`,
          );
      }
      const scrape = w.spec.template.metadata?.annotations?.['prometheus.io/port'];
      if (scrape !== undefined && listens && Number(scrape) !== listens.port)
        out.push(`${where}: prometheus.io/port ${scrape} is not ${listens.what} ${listens.port}`);
    }
  }
  out.push(...referenceDisagreements(docs));
  return out;
}

/** Services, Ingresses, autoscalers and budgets must point at what exists, by the names they use. */
function referenceDisagreements(docs: Manifest[]): string[] {
  const out: string[] = [];
  const deployments = docs.filter((d) => d.kind === 'Deployment');
  const podsMatching = (selector: Record<string, string>) =>
    deployments.filter((d) => Object.entries(selector).every(([k, v]) => d.spec.template.metadata?.labels?.[k] === v));
  const services = docs.filter((d) => d.kind === 'Service');
  for (const s of services) {
    const targets = podsMatching(s.spec.selector ?? {});
    if (targets.length === 0) out.push(`Service ${s.metadata.name}: its selector matches no Deployment's pods`);
    for (const p of s.spec.ports)
      for (const t of targets)
        for (const c of t.spec.template.spec.containers)
          if (portNumber(c, p.targetPort) === undefined)
            out.push(`Service ${s.metadata.name}: targetPort ${p.targetPort} is no port of ${t.metadata.name}`);
  }
  for (const i of docs.filter((d) => d.kind === 'Ingress'))
    for (const rule of i.spec.rules ?? [])
      for (const p of rule.http?.paths ?? []) {
        const b = p.backend.service;
        const s = services.find((x) => x.metadata.name === b.name);
        if (!s) out.push(`Ingress ${i.metadata.name}: no Service ${b.name}`);
        else if (!s.spec.ports.some((sp: Manifest) => sp.name === b.port.name || sp.port === b.port.number))
          out.push(`Ingress ${i.metadata.name}: Service ${b.name} has no port ${b.port.name ?? b.port.number}`);
      }
  for (const pdb of docs.filter((d) => d.kind === 'PodDisruptionBudget'))
    if (podsMatching(pdb.spec.selector.matchLabels).length === 0)
      out.push(`PodDisruptionBudget ${pdb.metadata.name}: its selector matches no Deployment's pods`);
  const scaled = [
    ...docs.filter((d) => d.kind === 'HorizontalPodAutoscaler').map((h) => [h, h.spec.scaleTargetRef.name] as const),
    ...docs.filter((d) => d.kind === 'ScaledObject').map((s) => [s, s.spec.scaleTargetRef.name] as const),
  ];
  for (const [a, target] of scaled) {
    if (!deployments.some((d) => d.metadata.name === target))
      out.push(`${a.kind} ${a.metadata.name}: no Deployment ${target}`);
    // An autoscaler on a metric the service does not export scales on nothing.
    const named = [
      ...(a.spec.metrics ?? []).map((m: Manifest) => m.pods?.metric?.name).filter(Boolean),
      ...(a.spec.triggers ?? [])
        .filter((t: Manifest) => t.type === 'prometheus')
        .flatMap((t: Manifest) => [...String(t.metadata.query).matchAll(/\b([a-z_]+)\s*(?:\{|\))/g)].map((m) => m[1])),
    ].filter((n) => !['sum', 'max', 'min', 'avg', 'vector', 'rate', 'increase'].includes(n));
    for (const n of named)
      if (!metricNames().has(n)) out.push(`${a.kind} ${a.metadata.name}: the service exports no metric ${n}`);
    if (named.length === 0 && a.kind === 'ScaledObject')
      out.push(`${a.kind} ${a.metadata.name}: scales on no metric of the service`);
  }
  const names = new Map<string, number>();
  for (const d of docs) names.set(`${d.kind}/${d.metadata.name}`, (names.get(`${d.kind}/${d.metadata.name}`) ?? 0) + 1);
  for (const [n, count] of names) if (count > 1) out.push(`${n}: defined ${count} times`);
  return out;
}
