import { expect } from 'chai';
import { KeepAlive } from '../../src/http/keep-alive.js';
import { ManualTimers } from '../support/manual-timers.js';

describe('stream keep-alives', () => {
  it('beat once the interval has passed with nothing written', () => {
    const timers = new ManualTimers();
    const beats: number[] = [];
    const keepAlive = new KeepAlive(15_000, () => beats.push(timers.now()), timers);
    timers.advance(46_000);
    expect(beats).to.deep.equal([15_000, 30_000, 45_000]);
    keepAlive.stop();
  });

  it('come at most one interval after the last write, however the writes fall between ticks', () => {
    const timers = new ManualTimers();
    const writes: number[] = [0];
    const keepAlive = new KeepAlive(15_000, () => writes.push(timers.now()), timers);
    // A chunk just after where a fixed tick would fall used to push the next beat nearly two intervals out.
    for (const at of [10, 15_010, 29_999, 31_000]) {
      timers.advance(at - timers.now());
      keepAlive.wrote();
      writes.push(at);
    }
    timers.advance(120_000 - timers.now());
    const gaps = writes.slice(1).map((t, i) => t - writes[i]!);
    expect(Math.max(...gaps)).to.be.at.most(15_000);
    keepAlive.stop();
  });

  it('do not beat while the stream is busy', () => {
    const timers = new ManualTimers();
    let beats = 0;
    const keepAlive = new KeepAlive(15_000, () => beats++, timers);
    for (let i = 0; i < 100; i++) {
      timers.advance(1000);
      keepAlive.wrote();
    }
    expect(beats).to.equal(0);
    keepAlive.stop();
  });

  it('stop for good', () => {
    const timers = new ManualTimers();
    let beats = 0;
    const keepAlive = new KeepAlive(15_000, () => beats++, timers);
    keepAlive.stop();
    timers.advance(60_000);
    expect(beats).to.equal(0);
    expect(timers.pending).to.equal(0);
  });
});
