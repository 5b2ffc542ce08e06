import { cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { freshModules } from '../support/fresh-modules';
import { classifyFailure, failureKindOf } from '../../src/verification/failure-kinds';
import { outcomeKindOf, parsePercentString, toOutcome } from '../../src/verification/outcome';

describe('outcomeKindOf', () => {
  it.each([
    ['Completed', 'completed'],
    ['Success', 'completed'],
    ['Partial', 'partial'],
    ['Failed', 'failed'],
    ['Pending', 'pending'],
    ['In-Progress', 'pending'],
    ['Queued', 'pending'],
    ['Escalated', 'unknown'],
  ])('%s is %s', (status, kind) => expect(outcomeKindOf(status)).toBe(kind));
});

describe('toOutcome', () => {
  it('refuses a verification whose correlationId is blank, naming it: the chart finds a response by it', () => {
    expect(() => toOutcome({ correlationId: ' ', status: 'Completed', result: {} })).toThrow(/correlationId[\s\S]*must not be blank/);
    expect(() => toOutcome({ correlationId: '', status: 'Completed', result: {} })).toThrow(/must not be blank/);
  });

  it('refuses a correlationId holding a control character, naming it: the chart could not be searched by it', () => {
    expect(() => toOutcome({ correlationId: 'ver_1\u0000', status: 'Completed', result: {} })).toThrow(/correlationId[\s\S]*must not hold control characters/);
  });

  it('reads a problem type, instance or v1 error code padded with whitespace as the one without it', () => {
    const padded = toOutcome({ correlationId: 'c', status: 'Failed', result: { type: ' https://errors.example/SiteMaintenance ', instance: ' urn:x:1 ' } });
    expect(padded.kind === 'failed' && padded.failure.kind).toBe('SiteMaintenance');
    expect(padded.kind === 'failed' && padded.problem).toMatchObject({ type: 'https://errors.example/SiteMaintenance', instance: 'urn:x:1' });
    const legacy = toOutcome({ correlationId: 'c', status: 'Failed', result: { details: { code: ' PORTAL_LOCKED ', message: 'locked' } } });
    expect(legacy.kind === 'failed' && legacy.problem.type).toBe('urn:v1-error:PORTAL_LOCKED');
  });

  it('keeps what it can read of problem details whose status is no HTTP status code, with a warning', () => {
    const o = toOutcome({ correlationId: 'c', status: 'Failed', result: { type: 'https://errors.example/Upstream ', title: 'Payer error', status: 503.5 } });
    expect(o.kind === 'failed' && o.problem).toEqual({ type: 'https://errors.example/Upstream', title: 'Payer error', detail: undefined });
    expect(o.warnings.join()).toMatch(/problem details not in the expected shape \(status: /);
  });

  it('keeps a status it does not know, with a warning', () => {
    const o = toOutcome({ correlationId: 'c', status: 'Escalated', result: {} });
    expect(o.kind).toBe('unknown');
    expect(o.kind === 'unknown' && o.status).toBe('Escalated');
    expect(o.warnings).toEqual(['status "Escalated" is not one this client knows; kept as is']);
    // A status of 500 KB is not copied whole into the warning, a log line.
    const huge = toOutcome({ correlationId: 'c', status: 'X'.repeat(500_000) });
    expect(huge.warnings).toEqual([`status "${'X'.repeat(60)}…" is not one this client knows; kept as is`]);
  });

  it('classifies a Failed result by the last segment of its problem type', () => {
    const o = toOutcome({
      correlationId: 'c',
      status: 'Failed',
      result: { type: 'https://errors.example/InvalidCredentials', title: 'Login refused', upstreamErrors: [{ detail: 'portal said no' }] },
    });
    expect(o.kind).toBe('failed');
    if (o.kind !== 'failed') return;
    expect(o.failure).toMatchObject({ kind: 'InvalidCredentials', action: 'needs-a-person' });
    expect(o.problem.upstreamErrors?.[0]?.detail).toBe('portal said no');
  });

  it('normalises a v1 failed result (details.code/message) with a warning', () => {
    const o = toOutcome({ correlationId: 'c', status: 'Failed', result: { details: { code: 'SiteMaintenance', message: 'portal down' } } });
    expect(o.kind === 'failed' && o.failure.action).toBe('retry-later');
    expect(o.kind === 'failed' && o.problem.detail).toBe('portal down');
    expect(o.warnings).toEqual(['v1 error shape (details.code/details.message) normalised to problem details']);
  });

  it('normalises v1 coinsurance strings into ranges with a warning, and leaves v2 ranges alone', () => {
    const o = toOutcome({
      correlationId: 'c',
      status: 'Completed',
      result: {
        data: {
          coinsurance: [
            { category: 'Basic', percentage: { final: '80%' } },
            { category: 'Major', percentage: { final: '50-60' } },
            { category: 'Preventive', percentage: { final: { start: 100, end: 100 } } },
          ],
        },
      },
    });
    expect(o.kind === 'completed' && o.result.data?.coinsurance?.map((c) => c?.percentage?.final)).toEqual([
      { start: 80, end: 80 },
      { start: 50, end: 60 },
      { start: 100, end: 100 },
    ]);
    expect(o.warnings).toEqual(['v1 coinsurance percentage.final strings normalised to {start, end}']);
  });
});

describe('toOutcome is permissive with what portals really send', () => {
  it('reads amounts written as text, and contexts and upstream errors without detail', () => {
    const o = toOutcome({
      correlationId: 'c',
      status: 'Partial',
      result: { data: { maximums: [{ amount: '1500.00', usedAmount: 300 }, { amount: '$3,000.00', usedAmount: '1,250', remainingAmount: '-$50' }] }, contexts: [{ portalId: 'p2' }] },
    });
    expect(o.kind === 'partial' && o.result.data?.maximums).toMatchObject([
      { amount: 1500, usedAmount: 300 },
      { amount: 3000, usedAmount: 1250, remainingAmount: -50 },
    ]);
    expect(o.kind === 'partial' && o.result.contexts).toEqual([{ portalId: 'p2' }]);
    const failed = toOutcome({ correlationId: 'c', status: 'Failed', result: { type: 'https://e/Upstream', upstreamErrors: [{ portalId: 'p1' }] } });
    expect(failed.kind === 'failed' && failed.problem.upstreamErrors).toEqual([{ portalId: 'p1' }]);
  });

  it('reads digits a service writes as JSON numbers as their text, and a null in a list, which the chart\'s writer passes over', () => {
    const o = toOutcome({
      correlationId: 'c',
      status: 'Completed',
      result: {
        subscriber: { memberId: 778899001 },
        plan: { groupNumber: 123456, payer: { name: 'Delta Dental', payerId: 94276 }, assignment: { office: { officeId: 17, address: { postalCode: 60601 } } } },
        data: { maximums: [null, { amount: 1500 }], history: [{ procedureCode: 'D2740', tooth: 14 }, null] },
        disclaimers: [null],
      },
    });
    expect(o.kind === 'completed' && [o.result.subscriber?.memberId, o.result.plan?.groupNumber, o.result.plan?.payer?.payerId, o.result.plan?.assignment?.office?.officeId, o.result.plan?.assignment?.office?.address?.postalCode]).toEqual(['778899001', '123456', '94276', '17', '60601']);
    expect(o.kind === 'completed' && [o.result.data?.maximums, o.result.data?.history, o.result.disclaimers]).toEqual([[null, { amount: 1500 }], [{ procedureCode: 'D2740', tooth: '14' }, null], [null]]);
    // A number where words are meant is still no text: it is left out, and kept as sent.
    const named = toOutcome({ correlationId: 'c', status: 'Completed', result: { plan: { name: 7, type: 'PPO' } } });
    expect(named.kind === 'completed' && [named.result.plan, named.unread, named.warnings]).toEqual([
      { type: 'PPO' },
      [{ path: 'result.plan.name', value: 7 }],
      ["result values not in the expected shape were left out and kept in the response's unmapped elements: result.plan.name"],
    ]);
  });

  it('leaves out digits written as a number that is not the digits sent: past 2^53 JSON.parse rounds them to another member id', () => {
    const memberId = (text: string) => toOutcome({ correlationId: 'c', status: 'Completed', result: { subscriber: { memberId: JSON.parse(text) as unknown, lastName: 'RIVERA' } } });
    // 12345678901234567890 parses to 12345678901234567000: another member's id, never read as this patient's.
    for (const text of ['12345678901234567890', '1e21', '14.5', '-5']) {
      const o = memberId(text);
      expect(o.kind === 'completed' && [o.result.subscriber, o.unread.map((u) => u.path)]).toEqual([{ lastName: 'RIVERA' }, ['result.subscriber.memberId']]);
    }
    const safe = memberId('9007199254740991');
    expect(safe.kind === 'completed' && [safe.result.subscriber?.memberId, safe.unread]).toEqual(['9007199254740991', []]);
  });

  it('reads what it can of a result: an entry of a list it cannot read becomes null, and a value a place must hold takes its holder with it', () => {
    const o = toOutcome({
      correlationId: 'c',
      status: 'Partial',
      result: {
        data: {
          maximums: [{ type: 'Annual', amount: '$1,500.00' }, { type: 'Lifetime', category: 'Orthodontics', amount: 'Unlimited' }, 'none'],
          coinsurance: [{ category: 'Basic', percentage: { final: { start: 80 } } }, { category: 'Major', procedureCodes: ['D2740', 2750] }],
        },
      },
    });
    expect(o.kind === 'partial' && o.result.data).toEqual({
      maximums: [{ type: 'Annual', amount: 1500 }, { type: 'Lifetime', category: 'Orthodontics' }, null],
      // Without its codes, a coinsurance of two crowns would be of all Major care: it goes whole.
      coinsurance: [{ category: 'Basic', percentage: {} }, null],
    });
    expect(o.kind === 'partial' && o.unread).toEqual([
      { path: 'result.data.maximums[1].amount', value: 'Unlimited' },
      { path: 'result.data.maximums[2]', value: 'none' },
      { path: 'result.data.coinsurance[0].percentage.final', value: { start: 80 } },
      { path: 'result.data.coinsurance[1]', value: { category: 'Major', procedureCodes: ['D2740', 2750] } },
    ]);
    // What an entry is of, not read, takes it whole: an in-network 80 % charted as any network's, once in 60 months as once a month.
    const qualified = toOutcome({
      correlationId: 'c',
      status: 'Completed',
      result: {
        data: {
          coinsurance: [{ category: 'Basic', network: 1, percentage: { final: { start: 80, end: 80 } } }],
          frequencies: [{ procedureCodes: ['D0330'], limit: 1, period: 'Months', periodLength: 'sixty' }],
          deductibles: [{ amount: 50, waivedCategories: 'Preventive' }],
        },
      },
    });
    expect(qualified.kind === 'completed' && [qualified.result.data, qualified.unread.map((u) => u.path)]).toEqual([
      { coinsurance: [null], frequencies: [null], deductibles: [null] },
      ['result.data.deductibles[0]', 'result.data.coinsurance[0]', 'result.data.frequencies[0]'],
    ]);
    // A result that is no object is no result.
    expect(() => toOutcome({ correlationId: 'c', status: 'Completed', result: 'Unlimited' })).toThrow(/expected object/);
  });

  it('keeps a v1 percentage that is no number as finalText, with a warning', () => {
    const o = toOutcome({ correlationId: 'c', status: 'Completed', result: { data: { coinsurance: [{ category: 'Major', percentage: { final: 'Not covered' } }] } } });
    expect(o.kind === 'completed' && o.result.data?.coinsurance?.[0]?.percentage).toEqual({ finalText: 'Not covered' });
    expect(o.warnings).toEqual(['v1 coinsurance percentage.final strings normalised to {start, end}']);
  });

  it('keeps the rest of problem details whose status is no HTTP status code: their errors, upstream errors and instance still say what failed', () => {
    const result = {
      type: 'https://errors.example/Upstream',
      title: 'Payer error',
      status: 0,
      instance: 'urn:x:1',
      upstreamErrors: [{ portalId: 'p1', detail: 'portal down' }],
      errors: [{ field: 'subscriber.memberId', message: 'unknown member' }],
      traceId: 't-1',
    };
    const o = toOutcome({ correlationId: 'c', status: 'Failed', result });
    const { status: _dropped, ...kept } = result;
    expect(o.kind === 'failed' && o.problem).toEqual(kept);
    expect(o.warnings).toEqual([expect.stringMatching(/^problem details not in the expected shape \(status: .*\); kept what could be read$/)]);
  });

  it('reads what it can of malformed problem details, with a warning', () => {
    const o = toOutcome({ correlationId: 'c', status: 'Failed', result: { type: 'https://e/Internal', title: 'Boom', errors: 'not a list' } });
    expect(o.kind === 'failed' && o.problem).toEqual({ type: 'https://e/Internal', title: 'Boom', detail: undefined });
    expect(o.warnings[0]).toMatch(/^problem details not in the expected shape \(errors: /);
  });
});

describe('failure kinds', () => {
  it('reads the kind from a type URI, trailing slash or fragment included', () => {
    expect(failureKindOf('https://errors.example/v2/PatientNotFound')).toBe('PatientNotFound');
    expect(failureKindOf('https://errors.example/Upstream/')).toBe('Upstream');
    expect(failureKindOf('urn:x#SiteMaintenance')).toBe('SiteMaintenance');
    expect(failureKindOf('urn:v1-error:InvalidCredentials')).toBe('InvalidCredentials');
    expect(failureKindOf(undefined)).toBe('Unknown');
    // RFC 9457's type of a problem that says no more than its status.
    expect(failureKindOf('about:blank')).toBe('Unknown');
    // A FHIR code in the chart: no space or control character around it, none doubled (fuzz seed 2787580677, case 473).
    expect(failureKindOf('https://errors.example/v2/Some\tNew  Kind ')).toBe('Some New Kind');
    expect(failureKindOf('https://errors.example/v2/PatientNotFound \u0000')).toBe('PatientNotFound');
  });

  it("reads a kind written otherwise than the table writes it as the table's, so one to retry is retried", () => {
    expect(failureKindOf('https://errors.example/v2/site-maintenance')).toBe('SiteMaintenance');
    expect(failureKindOf('urn:x#INVALID_CREDENTIALS')).toBe('InvalidCredentials');
    expect(classifyFailure('https://e/two-factor-authentication').action).toBe('retry-later');
    expect(classifyFailure('https://e/patient_not_found')).toMatchObject({ kind: 'PatientNotFound', action: 'needs-a-person' });
    // A kind the table does not hold stays as the service wrote it.
    expect(failureKindOf('https://e/site-closed')).toBe('site-closed');
  });

  it('refuses a table with two kinds a type URI names alike, which would be read as whichever came first', () => {
    const copy = mkdtempSync(path.join(tmpdir(), 'elig-mappings-'));
    try {
      cpSync(path.join(projectRoot, 'mappings'), copy, { recursive: true });
      const file = path.join(copy, 'failure-kinds.json');
      const table = JSON.parse(readFileSync(file, 'utf8')) as { kinds: Record<string, unknown> };
      table.kinds['up-stream'] = { action: 'needs-a-person', advice: 'call the payer' };
      writeFileSync(file, JSON.stringify(table));
      freshModules({ DENTAL_ELIG_MAPPINGS: copy }, () => {
        const kinds = jest.requireActual<typeof import('../../src/verification/failure-kinds')>('../../src/verification/failure-kinds');
        expect(() => kinds.failureKinds()).toThrow(/kinds\.up-stream: is Upstream written otherwise: a type URI names them alike/);
      });
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it('reads a copy of the mappings made before failure-kinds.json had an unknown entry: such a kind has no advice, as then', () => {
    const copy = mkdtempSync(path.join(tmpdir(), 'elig-mappings-'));
    try {
      cpSync(path.join(projectRoot, 'mappings'), copy, { recursive: true });
      const file = path.join(copy, 'failure-kinds.json');
      const { unknown: _unknown, ...before } = JSON.parse(readFileSync(file, 'utf8')) as Record<string, unknown>;
      writeFileSync(file, JSON.stringify(before));
      freshModules({ DENTAL_ELIG_MAPPINGS: copy }, () => {
        const kinds = jest.requireActual<typeof import('../../src/verification/failure-kinds')>('../../src/verification/failure-kinds');
        expect(kinds.classifyFailure('https://e/SomethingNew')).toEqual({ kind: 'SomethingNew', action: 'unknown' });
      });
    } finally {
      rmSync(copy, { recursive: true, force: true });
    }
  });

  it('sorts the service kinds into retry-later and needs-a-person, and keeps unknown ones', () => {
    const retry = ['SiteMaintenance', 'Upstream', 'Internal', 'TwoFactorAuthentication'];
    for (const kind of retry) expect(classifyFailure(`https://e/${kind}`).action).toBe('retry-later');
    for (const kind of ['InvalidCredentials', 'PatientNotFound', 'ThirdPartyAdministrator', 'TwoFactorAuthenticationConfiguration']) {
      expect(classifyFailure(`https://e/${kind}`).action).toBe('needs-a-person');
    }
    // Kept and surfaced, with advice the front desk can act on, not nothing.
    expect(classifyFailure('https://e/SomethingNew')).toEqual({
      kind: 'SomethingNew',
      action: 'unknown',
      advice: "The service gave a failure this plugin does not know; read its title and detail, and verify the benefits on the payer's portal or by phone.",
    });
  });
});

describe('parsePercentString', () => {
  it('reads single values, ranges and rejects prose', () => {
    expect(parsePercentString('80')).toEqual({ start: 80, end: 80 });
    expect(parsePercentString(' 60 % - 50 % ')).toEqual({ start: 50, end: 60 });
    expect(parsePercentString('50 to 80%')).toEqual({ start: 50, end: 80 });
    expect(parsePercentString('varies')).toBeUndefined();
  });
});
