import { expect } from 'chai';
import { latestDuePeriod, nextFireAtOrAfter } from '../../src/scheduler/cron.js';

describe('scheduler: when a job is due (UTC)', () => {
  it('finds the first fire time at or after a moment, including the moment itself', () => {
    expect(nextFireAtOrAfter('15 0 1 * *', new Date('2026-11-01T00:00:00Z')).toISOString()).to.equal(
      '2026-11-01T00:15:00.000Z',
    );
    expect(nextFireAtOrAfter('15 0 1 * *', new Date('2026-11-01T00:15:00Z')).toISOString()).to.equal(
      '2026-11-01T00:15:00.000Z',
    );
    expect(nextFireAtOrAfter('15 0 1 * *', new Date('2026-11-01T00:15:00.001Z')).toISOString()).to.equal(
      '2026-12-01T00:15:00.000Z',
    );
    expect(nextFireAtOrAfter('30 3 * * *', new Date('2026-11-22T12:00:00Z')).toISOString()).to.equal(
      '2026-11-23T03:30:00.000Z',
    );
  });

  it('makes the previous month due for invoicing once the 1st-of-month run time has passed', () => {
    const due = (at: string) => latestDuePeriod('month', '15 0 1 * *', new Date(at));
    expect(due('2026-11-01T00:14:59Z')).to.equal('2026-09');
    expect(due('2026-11-01T00:15:00Z')).to.equal('2026-10');
    expect(due('2026-11-22T13:00:00Z')).to.equal('2026-10');
    expect(due('2027-01-05T00:00:00Z')).to.equal('2026-12');
  });

  it('makes today due for a daily job once its time has passed, yesterday before', () => {
    const due = (at: string) => latestDuePeriod('day', '30 3 * * *', new Date(at));
    expect(due('2026-11-22T03:29:59Z')).to.equal('2026-11-21');
    expect(due('2026-11-22T03:30:00Z')).to.equal('2026-11-22');
    expect(due('2026-03-01T01:00:00Z')).to.equal('2026-02-28');
  });

  it('reads an hourly cron as due for the previous month after its first tick of the month', () => {
    expect(latestDuePeriod('month', '5 * * * *', new Date('2026-11-01T00:04:00Z'))).to.equal('2026-09');
    expect(latestDuePeriod('month', '5 * * * *', new Date('2026-11-01T00:05:00Z'))).to.equal('2026-10');
  });
});
