import { expect } from 'chai';
import { doneEvent, errorEvent, eventsAfter, lastEventIdIn, withEventId } from '../../src/chat/stream/sse.js';
import { completionId, originOf } from '../../src/chat/relay/protocol.js';

const run = [1, 2, 3].map((n) => withEventId(n, `data: {"n":${n},"text":"id: 9\\n\\nid: 10"}\n\n`)).join('');

describe('SSE event numbering', () => {
  it('finds the number of the last event in a run, even when a chunk’s text looks like an id line', () => {
    expect(lastEventIdIn(run)).to.equal(3);
    expect(lastEventIdIn(withEventId(7, 'data: x\n\n'))).to.equal(7);
  });

  it('has no number for a run of unnumbered events', () => {
    expect(lastEventIdIn('data: x\n\n')).to.equal(undefined);
    expect(lastEventIdIn('')).to.equal(undefined);
  });

  it('keeps exactly the events after a number, whole', () => {
    expect(eventsAfter(run, 0)).to.equal(run);
    expect(eventsAfter(run, 1)).to.equal(run.slice(run.indexOf('id: 2\n')));
    expect(eventsAfter(run, 2)).to.equal(withEventId(3, 'data: {"n":3,"text":"id: 9\\n\\nid: 10"}\n\n'));
    expect(eventsAfter(run, 3)).to.equal('');
    expect(eventsAfter(run, 99)).to.equal('');
  });

  it('numbers the events the web tier adds', () => {
    expect(doneEvent(4)).to.equal('id: 4\ndata: [DONE]\n\n');
    expect(errorEvent(5, { message: 'm', type: 't', code: 'c', param: null })).to.equal(
      'id: 5\ndata: {"error":{"message":"m","type":"t","code":"c","param":null}}\n\n',
    );
  });
});

describe('completion ids', () => {
  it('name the web process that took the request', () => {
    const id = completionId('AbC_-123');
    expect(id).to.match(/^chatcmpl-AbC_-123[A-Za-z0-9_-]{16}$/);
    expect(originOf(id)).to.equal('AbC_-123');
  });

  it('have no origin when this service did not make them', () => {
    for (const id of [
      'chatcmpl-short',
      'chatcmpl-AAAAAAAAAAAAAAAAAAAAAAAAA',
      'cmpl-AbC_-123AAAAAAAAAAAAAAAA',
      'chatcmpl-AbC_-123AAAAAAAAAAAAAAA.',
    ])
      expect(originOf(id), id).to.equal(undefined);
  });
});
