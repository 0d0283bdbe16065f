import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  bundlePathOf,
  newlyUnlocated,
  trustQuestion,
  TrustMemory,
  unlocatedNotice,
  withConsent,
  type TrustQuestion,
} from '../src/core/consent';
import { readFindingsNotification, readSource, type Untrusted } from '../src/core/protocol';
import { sourceRows } from '../src/core/sourceTree';
import { at, bundleSource, dumpSource } from './fixtures';

const BUNDLE = '/work/proj/captures/run-step12';
const CHANGED: Untrusted = {
  file: '/work/proj/train.py',
  reason: 'changed',
  message: 'not running /work/proj/train.py: its code changed since the capture; add --trust-entry /work/proj/train.py',
};

function unlocated(overrides: Parameters<typeof bundleSource>[0] = {}) {
  return bundleSource({ status: 'unlocated', origin: null, findings: [], entry: '/work/proj/train.py', ...overrides });
}

/** A fake server: refuses each file until it is in `trust`, then answers 'ran'. Records every call's trust. */
function fakeReplay(refusing: Untrusted[]) {
  const calls: string[][] = [];
  const run = (trust: string[]) => {
    calls.push(trust);
    const refused = refusing.find((u) => !trust.includes(u.file));
    return Promise.resolve(refused ? { untrusted: refused } : { ran: true });
  };
  return { calls, run, refusalOf: (answer: { untrusted?: Untrusted }) => answer.untrusted };
}

function asking(answers: boolean[]) {
  const asked: TrustQuestion[] = [];
  const ask = (question: TrustQuestion) => {
    asked.push(question);
    return Promise.resolve(answers.shift() ?? false);
  };
  return { asked, ask };
}

describe('trustQuestion', () => {
  it('names the file and why the replay refused it', () => {
    const changed = trustQuestion(CHANGED, 'run-step12 (step 12)');
    assert.equal(changed.message, 'Run train.py? It changed since the capture.');
    assert.equal(changed.run, 'Run train.py');
    assert.match(changed.detail, /run-step12 \(step 12\) names \/work\/proj\/train\.py/);
    assert.match(changed.detail, /--trust-entry/);
    const outside = trustQuestion({ file: '/tmp/evil/serve.py', reason: 'outside', message: '' });
    assert.equal(outside.message, 'Run serve.py? It is outside your workspace.');
    assert.match(outside.detail, /only if it is your own code/);
  });
});

describe('withConsent', () => {
  it('runs at once, asking nothing, when the replay refuses nothing', async () => {
    const replay = fakeReplay([]);
    const { asked, ask } = asking([]);
    const outcome = await withConsent(BUNDLE, new TrustMemory(), ask, replay.run, replay.refusalOf);
    assert.deepEqual(outcome, { answer: { ran: true } });
    assert.deepEqual([asked.length, replay.calls], [0, [[]]]);
  });

  it('asks once naming the file, then runs again with --trust-entry for it', async () => {
    const memory = new TrustMemory();
    const replay = fakeReplay([CHANGED]);
    const { asked, ask } = asking([true]);
    const outcome = await withConsent(BUNDLE, memory, ask, replay.run, replay.refusalOf, 'run-step12 (step 12)');
    assert.deepEqual(outcome.answer, { ran: true });
    assert.deepEqual(asked.map((q) => q.message), ['Run train.py? It changed since the capture.']);
    assert.deepEqual(replay.calls, [[], ['/work/proj/train.py']]);
    assert.ok(memory.has(BUNDLE, '/work/proj/train.py'));
  });

  it('remembers the answer for that bundle and file for the session: the next click asks nothing', async () => {
    const memory = new TrustMemory();
    await withConsent(BUNDLE, memory, asking([true]).ask, fakeReplay([CHANGED]).run, fakeReplay([]).refusalOf);
    const replay = fakeReplay([CHANGED]);
    const { asked, ask } = asking([]);
    const outcome = await withConsent(BUNDLE, memory, ask, replay.run, replay.refusalOf);
    assert.deepEqual([outcome.answer, asked.length, replay.calls], [{ ran: true }, 0, [['/work/proj/train.py']]]);
    // Another bundle naming the same file is another question.
    const other = fakeReplay([CHANGED]);
    const second = asking([false]);
    await withConsent('/work/proj/captures/other-step3', memory, second.ask, other.run, other.refusalOf);
    assert.equal(second.asked.length, 1);
  });

  it('runs nothing more when the user says no, and says which file was declined', async () => {
    const memory = new TrustMemory();
    const replay = fakeReplay([CHANGED]);
    const outcome = await withConsent(BUNDLE, memory, asking([false]).ask, replay.run, replay.refusalOf);
    assert.deepEqual(outcome.declined, CHANGED);
    assert.deepEqual(replay.calls, [[]]);
    assert.deepEqual(memory.files(BUNDLE), []);
  });

  it('never asks twice about a file already trusted (a refusal despite the flag ends the loop)', async () => {
    const memory = new TrustMemory();
    memory.remember(BUNDLE, CHANGED.file);
    const stubborn = { run: () => Promise.resolve({ untrusted: CHANGED }), refusalOf: (a: { untrusted: Untrusted }) => a.untrusted };
    const { asked, ask } = asking([true, true]);
    const outcome = await withConsent(BUNDLE, memory, ask, stubborn.run, stubborn.refusalOf);
    assert.deepEqual([asked.length, outcome.answer], [0, { untrusted: CHANGED }]);
  });

  it('gives up quietly when the server gives no answer (not running)', async () => {
    const { asked, ask } = asking([]);
    const outcome = await withConsent(BUNDLE, new TrustMemory(), ask, () => Promise.resolve(undefined), () => CHANGED);
    assert.deepEqual([outcome, asked.length], [{ answer: undefined }, 0]);
  });
});

describe('bundles waiting for a Locate', () => {
  it('reads unlocated sources, their program, why they are foreign and a refusal', () => {
    const source = at(readFindingsNotification({
      sources: [{ id: `bundle:${BUNDLE}`, kind: 'bundle', path: BUNDLE, label: 'run-step12 (step 12)', status: 'unlocated',
        origin: null, findings: [], entry: '/work/proj/train.py', foreign: 'captured on node-7', untrusted: CHANGED }],
    }), 0);
    assert.equal(source.status, 'unlocated');
    assert.deepEqual([source.entry, source.foreign, source.untrusted], ['/work/proj/train.py', 'captured on node-7', CHANGED]);
    const old = readSource({ id: 'dump:/d', kind: 'dump', path: '/d', status: 'ok' }); // a server without these keys
    assert.deepEqual([old?.entry, old?.foreign, old?.untrusted], [null, null, null]);
  });

  it('offers Locate in the Captures view, saying what it runs, and no replay or findings', () => {
    const row = at(sourceRows([unlocated({ foreign: 'captured on node-7' })]), 0);
    assert.equal(row.contextValue, 'nanlens.bundle.unlocated');
    assert.equal(row.description, 'not located (captured on node-7): Locate runs train.py');
    assert.equal(row.icon, 'search');
    assert.equal(row.path, BUNDLE);
    assert.match(row.tooltip, /only when you click Locate/);
    assert.match(row.tooltip, /never located automatically/);
    assert.deepEqual([row.replayTarget, row.children], [undefined, []]);
    const refused = at(sourceRows([unlocated({ untrusted: CHANGED })]), 0);
    assert.equal(refused.description, 'not located (train.py changed since the capture): Locate runs train.py');
  });

  it('announces each waiting bundle once, one notification for several', () => {
    const announced = new Set<string>();
    const first = unlocated();
    const fresh = newlyUnlocated([first, bundleSource(), dumpSource()], announced);
    assert.deepEqual(fresh.map((s) => s.id), [first.id]);
    const notice = unlocatedNotice(fresh);
    assert.ok(notice);
    assert.equal(
      notice.message,
      'NaN Lens: run-step12 (step 12) has no findings yet. Locating it replays the captured step, which runs train.py.',
    );
    assert.deepEqual([notice.actions, notice.bundle], [['Locate', 'Show Captures'], BUNDLE]);
    assert.deepEqual(newlyUnlocated([first], announced), [], 'not twice');
    const two = newlyUnlocated([unlocated({ id: 'bundle:/a' }), unlocated({ id: 'bundle:/b', entry: null })], announced);
    const several = unlocatedNotice(two);
    assert.ok(several);
    assert.match(several.message, /^NaN Lens: 2 capture bundles have no findings yet/);
    assert.deepEqual([several.actions, several.bundle], [['Show Captures'], undefined]);
    assert.equal(unlocatedNotice([]), undefined);
  });

  it('takes the bundle path out of a verify target', () => {
    assert.equal(bundlePathOf(`bundle:${BUNDLE}`), BUNDLE);
    assert.equal(bundlePathOf(BUNDLE), BUNDLE);
  });
});
