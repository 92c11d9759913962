import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { expect } from 'chai';
import { parse, stringify } from 'yaml';
import { anchorsOf } from '../support/markdown.js';
import { PROJECT_ROOT } from '../support/project.js';
import { exportedSeriesNames, metricNamesIn } from '../support/promql.js';
import { promtool } from '../support/prometheus.js';

// The monitoring that ships with the service (ops/): Prometheus's alert rules and their unit tests,
// the scrape configuration, and the Grafana dashboard. promtool (Debian's `prometheus` package)
// checks and runs them; the rest checks that they only ask for what the service exports.

const PROMETHEUS_DIR = path.join(PROJECT_ROOT, 'ops', 'prometheus');
const ALERTS = path.join(PROMETHEUS_DIR, 'alerts.yml');
const ALERT_TESTS = path.join(PROMETHEUS_DIR, 'alerts.test.yml');
const DASHBOARD = path.join(PROJECT_ROOT, 'ops', 'grafana', 'completions-dashboard.json');
const OPERATIONS = path.join(PROJECT_ROOT, 'docs', 'operations.md');

interface AlertRule {
  alert: string;
  expr: string;
  for?: string;
  labels?: Record<string, string>;
  annotations?: Record<string, string>;
}

interface Panel {
  id: number;
  type: string;
  title: string;
  datasource?: { type: string; uid: string };
  gridPos: { x: number; y: number; w: number; h: number };
  targets?: { expr: string; refId: string; datasource?: { type: string; uid: string } }[];
}

const alertRules = (): AlertRule[] =>
  (parse(readFileSync(ALERTS, 'utf8')) as { groups: { rules: AlertRule[] }[] }).groups.flatMap((g) => g.rules);

const dashboard = () =>
  JSON.parse(readFileSync(DASHBOARD, 'utf8')) as {
    __inputs: { name: string; type: string; pluginId: string }[];
    panels: Panel[];
  };

const queryPanels = (): Panel[] => dashboard().panels.filter((p) => p.type !== 'row');

/** Each panel query, as `panel title (refId)` and its PromQL. */
const dashboardQueries = (): { where: string; expr: string }[] =>
  queryPanels().flatMap((p) => (p.targets ?? []).map((t) => ({ where: `${p.title} (${t.refId})`, expr: t.expr })));

/** Grafana's variables, given a value of their kind, so that promtool can parse the query. */
const withGrafanaVariables = (expr: string): string =>
  expr.replaceAll('$__rate_interval', '5m').replaceAll('$__range', '1h').replaceAll('$__interval', '1m');

function expectOnlyExported(uses: { where: string; expr: string }[], exported: Set<string>): void {
  const unknown: string[] = [];
  for (const { where, expr } of uses) {
    const names = metricNamesIn(expr);
    if (names.length === 0) unknown.push(`${where}: no metric at all in ${expr}`);
    for (const name of names) if (!exported.has(name)) unknown.push(`${where}: ${name}`);
  }
  expect(unknown, `not exported by the service (src/metrics.ts):\n${unknown.join('\n')}`).to.deep.equal([]);
}

describe('the alert rules (ops/prometheus/alerts.yml)', () => {
  it('pass promtool check rules', () => {
    const r = promtool(['check', 'rules', ALERTS]);
    expect(r.status, r.output).to.equal(0);
  });

  it('fire and stay quiet as their unit tests expect (promtool test rules)', () => {
    const r = promtool(['test', 'rules', path.basename(ALERT_TESTS)], PROMETHEUS_DIR);
    expect(r.status, r.output).to.equal(0);
  });

  it('each have a unit test where the alert fires and one where it stays quiet', () => {
    const cases = (
      parse(readFileSync(ALERT_TESTS, 'utf8')) as {
        tests: { alert_rule_test?: { alertname: string; exp_alerts?: unknown[] }[] }[];
      }
    ).tests.flatMap((t) => t.alert_rule_test ?? []);
    const missing = alertRules().flatMap(({ alert }) => {
      const mine = cases.filter((c) => c.alertname === alert);
      return [
        ...(mine.some((c) => (c.exp_alerts ?? []).length > 0) ? [] : [`${alert}: no case where it fires`]),
        ...(mine.some((c) => (c.exp_alerts ?? []).length === 0) ? [] : [`${alert}: no case where it stays quiet`]),
      ];
    });
    expect(missing, missing.join('\n')).to.deep.equal([]);
  });

  it('each have a summary, a description, a severity and a runbook_url naming its own entry in docs/operations.md', () => {
    const anchors = anchorsOf(OPERATIONS);
    for (const rule of alertRules()) {
      expect(rule.annotations?.summary, `${rule.alert} summary`).to.be.a('string').and.not.empty;
      expect(rule.annotations?.description, `${rule.alert} description`).to.be.a('string').and.not.empty;
      expect(rule.labels?.severity, `${rule.alert} severity`).to.be.oneOf(['page', 'ticket']);
      const anchor = rule.alert.toLowerCase();
      expect(rule.annotations?.runbook_url, `${rule.alert} runbook_url`).to.equal(`docs/operations.md#${anchor}`);
      expect(anchors.has(anchor), `docs/operations.md has no heading "${rule.alert}"`).to.equal(true);
    }
  });

  it('use only metrics the service exports', async () => {
    expectOnlyExported(
      alertRules().map((r) => ({ where: r.alert, expr: r.expr })),
      await exportedSeriesNames(),
    );
  });
});

describe('the scrape configuration (ops/prometheus/prometheus.yml)', () => {
  it('passes promtool check config, with the alert rules it loads', () => {
    const r = promtool(['check', 'config', path.join(PROMETHEUS_DIR, 'prometheus.yml')]);
    expect(r.status, r.output).to.equal(0);
  });
});

describe('the Grafana dashboard (ops/grafana/completions-dashboard.json)', () => {
  it('queries only metrics the service exports', async () => {
    expectOnlyExported(dashboardQueries(), await exportedSeriesNames());
  });

  it('has panel queries that all parse as PromQL (promtool check rules)', () => {
    const dir = mkdtempSync(path.join(os.tmpdir(), 'svc-dashboard-'));
    try {
      const rules = dashboardQueries().map(({ expr }, i) => ({
        record: `dashboard:query_${i}`,
        expr: withGrafanaVariables(expr),
      }));
      const file = path.join(dir, 'dashboard-queries.yml');
      writeFileSync(file, stringify({ groups: [{ name: 'dashboard', rules }] }));
      const r = promtool(['check', 'rules', file]);
      expect(r.status, r.output).to.equal(0);
      expect(r.output).to.include(`${rules.length} rules found`);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('reads every query from the Prometheus data source chosen at import (${DS_PROMETHEUS})', () => {
    const d = dashboard();
    expect(d.__inputs).to.deep.include({
      name: 'DS_PROMETHEUS',
      label: 'Prometheus',
      description: 'The Prometheus that scrapes the web, worker and scheduler processes',
      type: 'datasource',
      pluginId: 'prometheus',
      pluginName: 'Prometheus',
    });
    for (const p of queryPanels()) {
      expect(p.datasource, p.title).to.deep.equal({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
      expect(p.targets, p.title).to.not.be.empty;
      for (const t of p.targets!)
        expect(t.datasource, `${p.title} ${t.refId}`).to.deep.equal({ type: 'prometheus', uid: '${DS_PROMETHEUS}' });
    }
  });

  it('shows the time to first token the client sees beside the upstream’s, in one panel', () => {
    const panel = queryPanels().find((p) => {
      const names = (p.targets ?? []).flatMap((t) => metricNamesIn(t.expr));
      return (
        names.includes('completion_client_ttft_seconds_bucket') &&
        names.includes('completion_upstream_ttft_seconds_bucket')
      );
    });
    expect(panel, 'a panel querying completion_client_ttft_seconds and completion_upstream_ttft_seconds').to.exist;
  });

  it('has panels with distinct ids, laid out within the 24-column grid', () => {
    const panels = dashboard().panels;
    expect(new Set(panels.map((p) => p.id)).size).to.equal(panels.length);
    for (const p of panels) expect(p.gridPos.x + p.gridPos.w, p.title).to.be.at.most(24);
  });
});

describe('the PromQL reader the checks above use', () => {
  it('finds the metric names of an expression, not its functions, labels, keywords or durations', () => {
    const expr =
      'histogram_quantile(0.99, sum by (le, provider) (rate(a_bucket{route!~"/x|y"}[$__rate_interval]))) / on() group_left b:rate5m or vector(1e3) unless c offset 5m';
    expect(metricNamesIn(expr)).to.deep.equal(['a_bucket', 'b:rate5m', 'c']);
  });
});
