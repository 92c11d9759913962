import { expect } from 'chai';
import { dependencyOf, OutageLog } from '../../src/infra/outage.js';

describe('the outage log: one line when a dependency goes, one when it returns', () => {
  const lines: { obj: Record<string, unknown>; msg: string }[] = [];
  let t = 0;
  const log = new OutageLog(
    { warn: (obj, msg) => lines.push({ obj: obj as Record<string, unknown>, msg }) },
    'Redis',
    () => t,
    0,
  );
  beforeEach(() => lines.splice(0));

  it('warns once at the first failure and counts the rest by source', () => {
    log.failure('completion queue', new Error('Connection is closed.'));
    for (let i = 0; i < 31; i++) log.failure('completion queue', new Error('Connection is closed.'));
    for (let i = 0; i < 5; i++) log.failure('metering', new Error('Connection is closed.'));
    expect(lines).to.have.length(1);
    expect(lines[0]!.msg).to.equal('Redis is unreachable; failures are counted until it answers again');
    expect(log.down).to.equal(true);
  });

  it('warns once when it answers again, with how long it was failing and the counts', () => {
    t = 5200;
    log.failure('metering', new Error('Connection is closed.'));
    log.recovered();
    log.recovered();
    expect(lines).to.deep.equal([
      {
        obj: { dependency: 'Redis', seconds: 5.2, failures: { 'completion queue': 32, metering: 6 } },
        msg: 'Redis answers again after about 5.2 s of failures',
      },
    ]);
    expect(log.down).to.equal(false);
  });

  it('tells a lost Redis connection from Postgres out of reach, and both from a bug', () => {
    expect(dependencyOf(new Error("Stream isn't writeable and enableOfflineQueue options is false"))).to.equal('Redis');
    expect(
      dependencyOf(Object.assign(new Error('connect ECONNREFUSED 127.0.0.1:5432'), { code: 'ECONNREFUSED' })),
    ).to.equal('Postgres');
    expect(dependencyOf(new TypeError('x is undefined'))).to.equal(undefined);
  });
});
