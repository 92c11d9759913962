import { readFileSync } from 'node:fs';
import path from 'node:path';
import { expect } from 'chai';
import { parse } from 'yaml';
import { isolatedPrefix } from '../support/env.js';
import { eventually } from '../support/http.js';
import { freePort } from '../support/private-redis.js';
import { startRole, type RoleProcess } from '../support/processes.js';
import { PROJECT_ROOT } from '../support/project.js';
import { PrivatePrometheus } from '../support/prometheus.js';

// A real Prometheus (Debian's; `npm test` installs it as root, elsewhere the test fails saying how
// to get it) scrapes a web, a worker and a scheduler process with the shipped scrape configuration
// (ops/prometheus/prometheus.yml), only its targets and intervals changed, and loads the shipped
// alert rules.

const PROMETHEUS_DIR = path.join(PROJECT_ROOT, 'ops', 'prometheus');
const JOBS = { web: 'completions-web', worker: 'completions-worker', scheduler: 'completions-scheduler' } as const;

interface ScrapeConfig {
  job_name: string;
  static_configs: { targets: string[] }[];
}

interface Target {
  labels: { job: string };
  health: string;
  lastError: string;
}

interface RuleGroup {
  rules: { name: string; health: string; lastError?: string; lastEvaluation: string }[];
}

/** The shipped configuration, scraping these targets every second and evaluating the rules as often. */
function testConfiguration(targets: Record<keyof typeof JOBS, string>): object {
  const shipped = parse(readFileSync(path.join(PROMETHEUS_DIR, 'prometheus.yml'), 'utf8')) as {
    scrape_configs: ScrapeConfig[];
    rule_files: string[];
  };
  const byJob = new Map<string, string>(
    Object.entries(JOBS).map(([role, job]) => [job, targets[role as keyof typeof JOBS]]),
  );
  expect(shipped.scrape_configs.map((c) => c.job_name).sort()).to.deep.equal([...byJob.keys()].sort());
  return {
    ...shipped,
    global: { scrape_interval: '1s', scrape_timeout: '1s', evaluation_interval: '1s' },
    rule_files: shipped.rule_files.map((f) => path.resolve(PROMETHEUS_DIR, f)),
    scrape_configs: shipped.scrape_configs.map((c) => ({
      ...c,
      static_configs: [{ targets: [byJob.get(c.job_name)!] }],
    })),
  };
}

describe('Prometheus scraping a web, a worker and a scheduler process with ops/prometheus', function () {
  this.timeout(60_000);
  const QUEUE_MAX_DEPTH = '750';
  const roles: RoleProcess[] = [];
  let prometheus: PrivatePrometheus | undefined;
  /** A moment by which every target had been scraped (and its samples stored) at least once. */
  let allUpAt = 0;

  before(async () => {
    const [workerPort, schedulerPort] = await Promise.all([freePort(), freePort()]);
    const env = { REDIS_PREFIX: isolatedPrefix(), QUEUE_MAX_DEPTH };
    roles.push(
      ...(await Promise.all([
        startRole('web', env),
        startRole('worker', { ...env, WORKER_METRICS_PORT: String(workerPort) }),
        startRole('scheduler', { ...env, SCHEDULER_METRICS_PORT: String(schedulerPort) }),
      ])),
    );
    const web = new URL(roles[0]!.url);
    prometheus = await new PrivatePrometheus(
      testConfiguration({ web: web.host, worker: `127.0.0.1:${workerPort}`, scheduler: `127.0.0.1:${schedulerPort}` }),
    ).start();
    const p = prometheus;
    await eventually(async () => {
      const { activeTargets } = await p.api<{ activeTargets: Target[] }>('targets?state=active');
      return activeTargets.length === 3 && activeTargets.every((t) => t.health === 'up') ? activeTargets : undefined;
    }, 'every target up').catch(async (err: Error) => {
      const { activeTargets } = await p.api<{ activeTargets: Target[] }>('targets?state=active');
      throw new Error(
        `${err.message}\n${activeTargets.map((t) => `${t.labels.job}: ${t.health} ${t.lastError}`).join('\n')}`,
      );
    });
    allUpAt = Date.now();
  });

  after(async () => {
    await prometheus?.stop();
    await Promise.all(roles.map((r) => r.stop()));
  });

  it('finds every job up', async () => {
    const up = await prometheus!.query('up');
    const byJob = Object.fromEntries(up.map((s) => [s.metric.job, s.value[1]]));
    expect(byJob).to.deep.equal({ [JOBS.web]: '1', [JOBS.worker]: '1', [JOBS.scheduler]: '1' });
  });

  it('loads every alert rule and evaluates each without error; an idle, healthy service raises no alert', async () => {
    const p = prometheus!;
    // Evaluated again once every target was scraped: before that, a worker not yet scraped is,
    // rightly, a pending NoWorkerTakingJobs.
    const rules = await eventually(async () => {
      const { groups } = await p.api<{ groups: RuleGroup[] }>('rules?type=alert');
      const all = groups.flatMap((g) => g.rules);
      return all.length > 0 && all.every((r) => Date.parse(r.lastEvaluation) > allUpAt) ? all : undefined;
    }, 'every rule evaluated after the first scrapes');
    const shipped = (
      parse(readFileSync(path.join(PROMETHEUS_DIR, 'alerts.yml'), 'utf8')) as {
        groups: { rules: { alert: string }[] }[];
      }
    ).groups.flatMap((g) => g.rules.map((r) => r.alert));
    expect(rules.map((r) => r.name).sort()).to.deep.equal([...shipped].sort());
    expect(
      rules.filter((r) => r.health !== 'ok').map((r) => `${r.name}: ${r.health} ${r.lastError ?? ''}`),
    ).to.deep.equal([]);
    const { alerts } = await p.api<{ alerts: { labels: { alertname: string }; state: string }[] }>('alerts');
    expect(alerts.map((a) => `${a.labels.alertname} (${a.state})`)).to.deep.equal([]);
  });

  it('stores the series the alerts select as they expect: the queue bound from the web tier, a scheduled job’s name as exported_job', async () => {
    const bound = await prometheus!.query('completion_queue_max_depth{role="web"}');
    expect(bound.map((s) => s.value[1])).to.deep.equal([QUEUE_MAX_DEPTH]);
    const failedRuns = await prometheus!.query('scheduler_job_runs_total{exported_job="invoices", outcome="failed"}');
    expect(failedRuns.map((s) => [s.metric.job, s.value[1]])).to.deep.equal([[JOBS.worker, '0']]);
  });
});
