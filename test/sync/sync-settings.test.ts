import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { createEligibilitySync, SyncSettings } from '../../src/service/eligibility-sync';

/** Settings that would make the worker spin or wait backwards are refused up front, naming the setting. */
describe('SyncSettings', () => {
  let dataDir: string;
  beforeEach(() => {
    dataDir = mkdtempSync(path.join(tmpdir(), 'elig-settings-'));
  });
  afterEach(() => rmSync(dataDir, { recursive: true, force: true }));

  // Refused before anything is opened: the folder stays empty.
  const create = (settings: SyncSettings) => () =>
    createEligibilitySync({ dataDir, service: { baseUrl: 'http://127.0.0.1:1', apiKey: 'k' }, fhir: { baseUrl: 'http://127.0.0.1:1/fhir' }, settings });

  it('refuses a backoff that starts above its ceiling', () => {
    expect(create({ backoffBaseMs: 10_000, backoffMaxMs: 5000 })).toThrow('settings: backoffBaseMs: must not exceed backoffMaxMs (5000)');
  });

  it('refuses polling a Pending verification with no wait between polls', () => {
    expect(create({ pollAfterMs: 0 })).toThrow(/^settings: pollAfterMs: /);
    expect(readdirSync(dataDir)).toEqual([]);
  });

  it('keeps the defaults and takes a base equal to the ceiling', () => {
    expect(SyncSettings.parse({})).toMatchObject({ backoffBaseMs: 2000, backoffMaxMs: 300_000, pollAfterMs: 5000 });
    expect(SyncSettings.parse({ backoffBaseMs: 400, backoffMaxMs: 400 })).toMatchObject({ backoffBaseMs: 400, backoffMaxMs: 400 });
  });
});
