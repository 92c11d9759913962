import { pino } from 'pino';
import { loadConfigOrExit } from '../src/config.js';
import { createContext } from '../src/context.js';
import { parseMonthKey } from '../src/calendar.js';
import { latestDuePeriod } from '../src/scheduler/cron.js';
import { recentJobRuns, runJob } from '../src/scheduler/job-runner.js';
import { isJobName, JOBS } from '../src/scheduler/jobs.js';

// `npm run run-job -- JOB [options]` runs a scheduled job now, printing one progress line per
// account on stdout (logs go to stderr). It takes the same claim as the scheduler, so it never
// runs alongside a replica working on the same period, and it runs even when the period already
// succeeded (re-running bills nothing twice). Exit codes: 0 done, 1 the job failed for some
// account or crashed, 64 usage, 75 another process is running this period now, 78 configuration.

const USAGE = `usage: npm run run-job -- <job> [options]
  invoices  [--month YYYY-MM] [--account ID]... [--here]
                                                   invoice a month that has ended (default: the latest due month),
                                                   one job per account for the workers, or in this process with --here
  reconcile [--account ID]...                      compare every account with Stripe and repair drift
  rollup    [--month YYYY-MM]                      check a month's usage totals against the ledger, rebuild if they differ
  sign-ins                                         delete sign-in links and console sessions that ended over a day ago
  responses                                        delete stored responses past RESPONSES_RETENTION_DAYS
  status                                           the latest scheduler runs
--account limits the run to those accounts and leaves scheduler_runs untouched.`;

function usage(message?: string): never {
  if (message) process.stderr.write(`run-job: ${message}\n`);
  process.stderr.write(`${USAGE}\n`);
  process.exit(64);
}

const args = process.argv.slice(2);
const name = args.shift();
if (!name || name === '--help' || name === '-h') usage();
let month: string | undefined;
let here = false;
const accounts: string[] = [];
while (args.length) {
  const flag = args.shift()!;
  const value = () => args.shift() ?? usage(`${flag} needs a value`);
  if (flag === '--month') month = value();
  else if (flag === '--account') accounts.push(value());
  else if (flag === '--here' && name === 'invoices') here = true;
  else usage(`unknown option ${flag}`);
}
if (name !== 'status' && !isJobName(name)) usage(`unknown job ${name}`);
const daily = name === 'reconcile' || name === 'sign-ins' || name === 'responses';
if (month !== undefined && (daily || !parseMonthKey(month)))
  usage(daily ? `--month does not apply to ${name}` : `--month must be YYYY-MM (got ${month})`);
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
for (const a of accounts) if (!UUID.test(a)) usage(`--account must be an account id (a UUID), got ${a}`);

const config = loadConfigOrExit();
const logger = pino({ level: config.log.level, base: { role: 'run-job', pid: process.pid } }, pino.destination(2));
const app = createContext(config, { role: 'run-job', logger });
const say = (line: string) => process.stdout.write(`${line}\n`);

let code = 0;
try {
  if (name === 'status') {
    for (const r of await recentJobRuns(app.db, 20)) {
      say(
        `${r.job.padEnd(10)} ${r.period_key.padEnd(10)} ${r.status.padEnd(9)} started ${r.started_at.toISOString()}${r.finished_at ? ` finished ${r.finished_at.toISOString()}` : ''}`,
      );
    }
  } else {
    const job = JOBS[name];
    const period = month ?? latestDuePeriod(job.granularity, job.cron(config), app.clock.now());
    if (job.name === 'invoices' && parseMonthKey(period)!.end.getTime() > app.clock.now().getTime()) {
      usage(
        `month ${period} has not ended yet; only a finished month can be invoiced (on-demand invoices cover the current month)`,
      );
    }
    say(`${job.name} ${period}: starting${accounts.length ? ` for ${accounts.length} account(s)` : ''}`);
    const r = await runJob(app, job, period, { force: true, accounts, inProcess: here, progress: say });
    if (r.outcome === 'busy') {
      say(
        `${job.name} ${period}: another scheduler or run-job is running this period right now; try again when it has finished`,
      );
      code = 75;
    } else if (r.outcome === 'ran') {
      say(`${job.name} ${period}: ${r.ok ? 'succeeded' : 'FAILED'}`);
      if (!r.ok) {
        if (r.summary.error)
          say(`  error: ${typeof r.summary.error === 'string' ? r.summary.error : JSON.stringify(r.summary.error)}`);
        code = 1;
      }
    }
  }
} catch (err) {
  process.stderr.write(`run-job: ${err instanceof Error ? (err.stack ?? err.message) : String(err)}\n`);
  code = 1;
} finally {
  await app.close();
}
process.exit(code);
