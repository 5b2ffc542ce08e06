import { readFileSync } from 'node:fs';
import { mkdir, mkdtemp, readdir, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import * as path from 'node:path';
import { projectRoot } from '../../src/mapping-files';
import { startSandbox, type Sandbox } from '../../src/sandbox';
import { cli } from '../support/cli';
import { json, startScriptedServer } from '../support/http-server';

let sandbox: Sandbox;
let env: NodeJS.ProcessEnv;
let dir: string;

beforeAll(async () => {
  sandbox = await startSandbox({ seed: true, timing: { asyncCompletionMs: 50, validationMs: 50 } });
  dir = await mkdtemp(path.join(tmpdir(), 'setup-cli-'));
  env = {
    DENTAL_ELIG_BASE_URL: sandbox.url,
    DENTAL_ELIG_API_KEY: sandbox.apiKey,
    DENTAL_ELIG_CUSTOMER_ID: sandbox.customerId,
    DENTAL_ELIG_CATALOG: path.join(dir, 'catalog.json'),
  };
});
afterAll(async () => {
  await sandbox.close();
  await rm(dir, { recursive: true, force: true });
});

const field = (out: string, name: string) => new RegExp(`^${name}\\s+(\\S+)`, 'm').exec(out)?.[1] ?? '';

describe('the README onboarding walkthrough, command by command', () => {
  it('onboards a practice, stores and validates credentials, then verifies sync and async', async () => {
    const org = await cli(['setup', 'organization', 'create', '--name', 'Lakeside Dental'], env);
    expect(org.code).toBe(0);
    const organizationId = field(org.stdout, 'organizationId');
    expect(organizationId).toMatch(/\S/);

    const clinic = await cli(['setup', 'clinic', 'create', '--organization', organizationId, '--name', 'Lakeside Main', '--npi', '1234567893'], env);
    expect(clinic.code).toBe(0);
    const clinicId = field(clinic.stdout, 'clinicId');

    const payers = await cli(['setup', 'payers', 'list', '--async', '--search', 'delta'], env);
    expect(payers.stdout).toMatch(/^name\s+commonPayerId/);
    expect(payers.stdout).toContain('Delta Dental of California');
    expect(payers.stdout).not.toContain('Delta Dental of Washington'); // sync-only

    const reg = await cli(['setup', 'registration', 'create', '--clinic', clinicId, '--portal', 'deltadentalins'], env);
    const registeredEmail = field(reg.stdout, 'registeredEmail');
    expect(registeredEmail).toMatch(/@/);

    const set = await cli(
      ['setup', 'credentials', 'set', '--clinic', clinicId, '--portal', 'deltadentalins', '--username', 'lakeside', '--mfa-email', registeredEmail],
      { ...env, DENTAL_ELIG_PORTAL_PASSWORD: 'portal-pass-1' },
    );
    expect(set.code).toBe(0);
    expect(set.stdout).not.toContain('portal-pass-1');

    const validate = await cli(['setup', 'credentials', 'validate', '--clinic', clinicId, '--portal', 'deltadentalins', '--wait', '--first-delay-ms', '60'], env);
    expect(validate.stderr).toMatch(/^validating credentials \(\S+\) .*Valid/);
    expect(field(validate.stdout, 'status')).toBe('Valid');
    expect(validate.code).toBe(0);

    const body = {
      clinicId,
      portalId: 'deltadentalins',
      payer: { payerId: 'CDCA1', name: 'Delta Dental of California' },
      patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14' },
      subscriber: { firstName: 'Ellen', lastName: 'Whitaker', memberId: 'SBX-COMPLETE', relationship: 'Self' },
      provider: { npi: '1234567893' },
      dateOfService: '2026-12-01',
      externalId: 'walkthrough-1',
    };
    const file = path.join(dir, 'request.json');
    await writeFile(file, JSON.stringify(body));
    const sync = await cli(['verify', file], env);
    expect(sync.code).toBe(0);
    expect(field(sync.stdout, 'status')).toBe('Completed');
    expect(field(sync.stdout, 'participation')).toBe('Participating');

    const asyncRun = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '60'], env, JSON.stringify({ ...body, externalId: 'walkthrough-2' }));
    expect(asyncRun.code).toBe(0);
    expect(asyncRun.stderr).toMatch(/^queued \S+; polling .*Completed/);
    expect(field(asyncRun.stdout, 'status')).toBe('Completed');

    const listed = await cli(['setup', 'clinic', 'list', '--organization', organizationId, '--json'], env);
    expect(JSON.parse(listed.stdout)).toEqual([expect.objectContaining({ clinicId, name: 'Lakeside Main' })]);
  });

  it('stores credentials as their portal takes them, so the verifications that use them are not refused for the login method or a second factor', async () => {
    const org = await cli(['setup', 'organization', 'create', '--name', 'Lakeview Dental'], env);
    const clinic = await cli(['setup', 'clinic', 'create', '--organization', field(org.stdout, 'organizationId'), '--name', 'Lakeview'], env);
    const clinicId = field(clinic.stdout, 'clinicId');
    const reg = await cli(['setup', 'registration', 'create', '--clinic', clinicId, '--portal', 'deltadentalil'], env);
    const registeredEmail = field(reg.stdout, 'registeredEmail');
    const withPassword = { ...env, DENTAL_ELIG_PORTAL_PASSWORD: 'portal-pass-3' };
    const set = (...args: string[]) => cli(['setup', 'credentials', 'set', '--clinic', clinicId, '--username', 'lakeview', ...args], withPassword);

    // Delta Dental of Illinois's portal logs in by SSO alone: a login method not given is the one it takes.
    const stored = await set('--portal', 'deltadentalil', '--mfa-email', registeredEmail);
    expect(stored.code).toBe(0);
    expect(field(stored.stdout, 'loginMethod')).toBe('SSO');
    const body = {
      clinicId,
      portalId: 'deltadentalil',
      payer: { payerId: 'CDIL1' },
      patient: { firstName: 'Ellen', lastName: 'Whitaker', dateOfBirth: '1978-03-14' },
      subscriber: { firstName: 'Ellen', lastName: 'Whitaker', memberId: 'SBX-MINIMAL', relationship: 'Self' },
      dateOfService: '2026-12-01',
    };
    const verified = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '60'], env, JSON.stringify(body));
    expect([verified.code, field(verified.stdout, 'status')]).toEqual([0, 'Completed']);

    // Refused before anything is stored, each in one line naming the option: the service would refuse every verification with them.
    const refusals = [
      [await set('--portal', 'deltadentalil', '--mfa-email', registeredEmail, '--login-method', 'Native'), '--login-method: portal deltadentalil takes SSO, not Native'],
      [await set('--portal', 'metdental'), "--mfa-email: required: portal metdental sends its login codes by email (TwoFactorEmail); give its registration's registeredEmail (setup registration list)"],
      [await set('--portal', 'cignaforhcp'), "--mfa-phone: required: portal cignaforhcp sends its login codes by SMS (TwoFactorSms); give its registration's registeredPhoneNumber (setup registration list)"],
      [await cli(['setup', 'credentials', 'update', '--clinic', clinicId, '--portal', 'deltadentalil', '--login-method', 'Native'], env), '--login-method: portal deltadentalil takes SSO, not Native'],
    ] as const;
    for (const [run, line] of refusals) expect(run).toEqual({ code: 2, stdout: '', stderr: `dental-elig: ${line}\n` });
    expect((await cli(['setup', 'credentials', 'get', '--clinic', clinicId, '--portal', 'metdental'], env)).stderr).toMatch(/no credentials are stored/);
    expect(field((await cli(['setup', 'credentials', 'get', '--clinic', clinicId, '--portal', 'deltadentalil'], env)).stdout, 'loginMethod')).toBe('SSO');
  });

  it('syncs the payer catalog to a file and reports the counts and the absolute path it wrote', async () => {
    const run = await cli(['setup', 'payers', 'sync'], env);
    expect(run.code).toBe(0);
    expect(run.stdout).toBe(`payer catalog (full): 16 payers, 15 portals -> ${path.join(dir, 'catalog.json')}\n`);
    const again = await cli(['setup', 'payers', 'sync', '--json'], env);
    expect(again.code).toBe(0);
    expect(JSON.parse(again.stdout)).toEqual({
      file: path.join(dir, 'catalog.json'),
      mode: 'changes since the last sync',
      syncedAt: expect.stringMatching(/^\d{4}-/),
      payers: 16,
      portals: 15,
      removedPayers: 0,
    });
  });

  it('names a catalog file that cannot be written, and leaves no copy beside it', async () => {
    const folder = path.join(dir, 'a-folder');
    await mkdir(folder);
    const run = await cli(['setup', 'payers', 'sync'], { ...env, DENTAL_ELIG_CATALOG: folder });
    expect(run).toEqual({
      code: 1,
      stdout: '',
      stderr: `dental-elig: payer catalog ${folder}: cannot be written (EISDIR); DENTAL_ELIG_CATALOG or catalogFile in the config file names where it goes\n`,
    });
    expect((await readdir(dir)).filter((name) => name.endsWith('.tmp'))).toEqual([]);
  });

  it('exits non-zero with one line for a Failed verification', async () => {
    const body = {
      clinicId: 'cln_sandbox_main',
      portalId: 'deltadentalins',
      payer: { payerId: 'CDCA1' },
      patient: { firstName: 'A', lastName: 'B', dateOfBirth: '1980-01-01' },
      subscriber: { firstName: 'A', lastName: 'B', memberId: 'SBX-FAIL-InvalidCredentials', relationship: 'Self' },
      dateOfService: '2026-12-01',
    };
    const run = await cli(['verify', '-'], env, JSON.stringify(body));
    expect(run.code).toBe(1);
    expect(field(run.stdout, 'failure')).toBe('InvalidCredentials');
    expect(run.stderr).toMatch(/^dental-elig: verification \S+: Failed \(InvalidCredentials, needs-a-person\)\n$/);
  });
});

describe('secrets and bad input', () => {
  it('refuses a password on the command line, naming the safe ways', async () => {
    const run = await cli(['setup', 'credentials', 'set', '--clinic', 'c', '--portal', 'p', '--username', 'u', '--password', 'hunter2'], env);
    expect(run.code).toBe(2);
    expect(run.stderr).toBe('dental-elig: --password: passwords are not taken on the command line; set DENTAL_ELIG_PORTAL_PASSWORD or use --password-stdin\n');
  });

  it('answers a command given wrong, or without what it needs, with exit 2 (usage), as README says, before asking the service', async () => {
    const usage = async (args: string[], extra: Record<string, string> = {}) => {
      const run = await cli(args, { ...env, ...extra });
      return [run.code, run.stderr.replace(/^dental-elig: /, '').trim()];
    };
    expect(await usage(['setup', 'credentials', 'set', '--clinic', 'c', '--portal', 'p', '--username', 'u'])).toEqual([2, 'password: set DENTAL_ELIG_PORTAL_PASSWORD or use --password-stdin']);
    expect(await usage(['setup', 'credentials', 'set', '--clinic', 'c', '--portal', 'p', '--username', 'u', '--login-method', 'OAuth'], { DENTAL_ELIG_PORTAL_PASSWORD: 'pw' })).toEqual([
      2,
      '--login-method: must be Native or SSO',
    ]);
    expect(await usage(['setup', 'credentials', 'update', '--clinic', 'c', '--portal', 'p'])).toEqual([
      2,
      'update: give at least one of --username, a password, --login-method, --mfa-email, --mfa-phone',
    ]);
    expect(await usage(['setup', 'organization', 'list'], { DENTAL_ELIG_CUSTOMER_ID: '' })).toEqual([2, '--customer: required (or set DENTAL_ELIG_CUSTOMER_ID)']);
  });

  it('reads the password from stdin', async () => {
    const run = await cli(['setup', 'credentials', 'set', '--clinic', 'cln_nope', '--portal', 'metdental', '--username', 'u', '--mfa-email', 'office@example.test', '--password-stdin'], env, 'from-stdin\n');
    // The clinic does not exist: the service's answer, in one line, and never the password.
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: store credentials failed with 4\d\d/);
    expect(run.stderr).not.toContain('from-stdin');
  });

  it('refuses an API key in the config file', async () => {
    const file = path.join(dir, 'bad-config.json');
    await writeFile(file, JSON.stringify({ baseUrl: sandbox.url, apiKey: 'sk_in_file' }));
    const run = await cli(['--config', file, 'setup', 'portals', 'list'], { DENTAL_ELIG_API_KEY: 'x' });
    expect(run.code).toBe(2);
    expect(run.stderr).toBe(`dental-elig: ${file}: apiKey: secrets do not belong in the config file; set DENTAL_ELIG_API_KEY or apiKeyFile\n`);
  });

  it('reads the API key from a key file named in the config file', async () => {
    const keyFile = path.join(dir, 'key');
    await writeFile(keyFile, `${sandbox.apiKey}\n`);
    const file = path.join(dir, 'config.json');
    await writeFile(file, JSON.stringify({ baseUrl: sandbox.url, apiKeyFile: keyFile }));
    const run = await cli(['--config', file, 'setup', 'portals', 'list', '--json'], {});
    expect(run.code).toBe(0);
    expect(JSON.parse(run.stdout).length).toBeGreaterThan(5);
  });

  it('says what is missing when nothing is configured', async () => {
    const run = await cli(['setup', 'portals', 'list'], {});
    expect(run).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: baseUrl: not configured; set DENTAL_ELIG_BASE_URL or baseUrl in the config file\n' });
  });

  it('names the base URL when it is not a URL at all, not an internal error', async () => {
    const run = await cli(['setup', 'portals', 'list'], { DENTAL_ELIG_BASE_URL: 'verify.example.com', DENTAL_ELIG_API_KEY: 'k' });
    expect(run).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: DENTAL_ELIG_BASE_URL: must be an http(s) URL\n' });
  });

  it('refuses a base URL that is not the service root: a query, a fragment or credentials in it', async () => {
    const run = (baseUrl: string) => cli(['setup', 'portals', 'list'], { DENTAL_ELIG_BASE_URL: baseUrl, DENTAL_ELIG_API_KEY: 'k' });
    const notRoot = { code: 2, stdout: '', stderr: 'dental-elig: DENTAL_ELIG_BASE_URL: must be the service root, without a query or fragment (the client adds /v2/… to it)\n' };
    expect(await run(`${sandbox.url}?tenant=1`)).toEqual(notRoot);
    expect(await run(`${sandbox.url}/#v2`)).toEqual(notRoot);
    expect(await run(sandbox.url.replace('://', '://user:pw@'))).toEqual({
      code: 2,
      stdout: '',
      stderr: 'dental-elig: DENTAL_ELIG_BASE_URL: credentials do not belong in the URL; the API key comes from DENTAL_ELIG_API_KEY or apiKeyFile\n',
    });
  });

  it('names an API key copied with its line end, or a key header no request can carry, never the key itself', async () => {
    const run = (more: NodeJS.ProcessEnv) => cli(['setup', 'portals', 'list'], { DENTAL_ELIG_BASE_URL: sandbox.url, DENTAL_ELIG_API_KEY: sandbox.apiKey, ...more });
    expect(await run({ DENTAL_ELIG_API_KEY: `${sandbox.apiKey}\r\n` })).toEqual({
      code: 2,
      stdout: '',
      stderr: 'dental-elig: DENTAL_ELIG_API_KEY: holds a line break or another control character (copied with its line end?)\n',
    });
    // A zero-width space a web page put in the copied key: Node cannot send it, and said only 'Network error'.
    expect(await run({ DENTAL_ELIG_API_KEY: `${sandbox.apiKey}\u200b` })).toEqual({
      code: 2,
      stdout: '',
      stderr: 'dental-elig: DENTAL_ELIG_API_KEY: holds a character no HTTP header can carry, past U+00FF (copied from a web page or a document?)\n',
    });
    expect(await run({ DENTAL_ELIG_API_KEY_HEADER: 'x api key' })).toEqual({
      code: 2,
      stdout: '',
      stderr: 'dental-elig: DENTAL_ELIG_API_KEY_HEADER: must be an HTTP header name: no spaces, colons or other separators\n',
    });
  });

  it('names the field of a request file that is not a verification request', async () => {
    const run = await cli(['verify', '-'], env, JSON.stringify({ clinicId: 'c' }));
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: stdin: payer: /);
  });

  it('names the field of a bad option value before anything is sent', async () => {
    const run = await cli(['setup', 'clinic', 'create', '--organization', 'org_1', '--name', 'X', '--npi', '12'], env);
    expect(run).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: create clinic failed (invalid_request) - Request not sent - npi: must be 10 digits\n' });
  });

  it('takes whole numbers only for waiting options, so a typo never polls in a tight loop', async () => {
    const run = await cli(['setup', 'credentials', 'validate', '--clinic', 'c', '--portal', 'p', '--wait', '--first-delay-ms', 'abc'], env);
    expect(run).toEqual({ code: 2, stdout: '', stderr: 'dental-elig: --first-delay-ms: must be a whole number\n' });
  });

  it('exits 1 when an asynchronous verification is still Pending when the wait ends', async () => {
    const body = {
      clinicId: 'cln_sandbox_main',
      portalId: 'deltadentalins',
      payer: { payerId: 'CDCA1' },
      patient: { firstName: 'A', lastName: 'B', dateOfBirth: '1980-01-01' },
      subscriber: { firstName: 'A', lastName: 'B', memberId: 'SBX-SLOW', relationship: 'Self' },
      dateOfService: '2026-12-01',
    };
    const run = await cli(['verify', '-', '--async', '--wait', '--first-delay-ms', '20', '--timeout-ms', '100'], env, JSON.stringify(body));
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^queued \S+; polling Pending.*\ndental-elig: verification \S+: still Pending after 100 ms\n$/s);
  });

  it('validates credentials before they are stored, as the service recommends, the password from the environment', async () => {
    const inline = ['setup', 'credentials', 'validate', '--portal', 'deltadentalins', '--wait', '--first-delay-ms', '0'];
    const valid = await cli([...inline, '--username', 'lakeside'], { ...env, DENTAL_ELIG_PORTAL_PASSWORD: 'portal-pass-7' });
    expect(valid.code).toBe(0);
    expect(field(valid.stdout, 'status')).toBe('Valid');
    // The sandbox refuses a password with 'wrong' in it: these credentials, not the ones stored, were tried.
    const refused = await cli([...inline, '--username', 'lakeside', '--password-stdin'], env, 'wrong-pass-7\n');
    expect(refused.code).toBe(1);
    expect(field(refused.stdout, 'status')).toBe('Invalid');
    expect(refused.stdout + refused.stderr).not.toContain('wrong-pass-7');
    expect(await cli(inline, env)).toMatchObject({ code: 2, stderr: 'dental-elig: validate: give --clinic (the credentials stored for it) or --username (credentials not stored yet), one of them\n' });
    expect((await cli([...inline, '--username', 'lakeside'], env)).stderr).toBe('dental-elig: password: set DENTAL_ELIG_PORTAL_PASSWORD or use --password-stdin\n');
    expect((await cli([...inline, '--clinic', 'cln_sandbox_main', '--password-stdin'], env, 'x\n')).stderr).toBe('dental-elig: --clinic: validates the stored password; a password goes with --username\n');
  });

  it('lists the portals of a payer as the payer catalog takes them, synchronous ones unless the feature says it is not supported', async () => {
    const payers = [
      { primaryPayerId: 'AAA111', name: 'Quiet Dental', features: { insuranceVerificationSynchronous: { portals: ['quietportal'] } } },
      { primaryPayerId: 'BBB222', name: 'Async Dental', features: { insuranceVerificationSynchronous: { supported: false, portals: ['off'] }, insuranceVerificationAsynchronous: { supported: true, portals: ['asyncportal'] } } },
    ];
    const server = await startScriptedServer((_req, res) => json(res, 200, { items: payers, nextCursor: null }));
    try {
      const run = await cli(['setup', 'payers', 'list'], { ...env, DENTAL_ELIG_BASE_URL: server.url });
      expect(run.stdout.split('\n').slice(1, 3).map((line) => line.split(/\s{2,}/))).toEqual([
        ['Quiet Dental', 'AAA111', 'no', 'quietportal'],
        ['Async Dental', 'BBB222', 'yes', 'asyncportal'],
      ]);
    } finally {
      await server.close();
    }
  });

  it('cuts the password it validates out of the polled result that quotes it', async () => {
    const server = await startScriptedServer((req, res) =>
      req.method === 'POST'
        ? json(res, 202, { correlationId: 'val_9', status: 'Pending' })
        : json(res, 200, { correlationId: 'val_9', status: 'Invalid', result: { title: 'Invalid credentials', detail: 'login lakeside/quoted-pass-9 refused' } }),
    );
    try {
      const run = await cli(
        ['setup', 'credentials', 'validate', '--portal', 'metdental', '--username', 'lakeside', '--wait', '--first-delay-ms', '0', '--json'],
        { ...env, DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_PORTAL_PASSWORD: 'quoted-pass-9' },
      );
      expect(JSON.parse(server.requests[0]?.body ?? '')).toEqual({ portalId: 'metdental', credentials: { username: 'lakeside', password: 'quoted-pass-9' } });
      expect(run.code).toBe(1);
      expect(run.stderr).toContain('validation val_9: Invalid - login lakeside/[redacted] refused');
      expect(run.stdout + run.stderr).not.toContain('quoted-pass-9');
      // Asked for again by its id, the password exported for validate is cut out too.
      const again = await cli(['setup', 'credentials', 'validation', 'val_9', '--json'], { ...env, DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_PORTAL_PASSWORD: 'quoted-pass-9' });
      expect([again.code, again.stderr]).toEqual([1, 'dental-elig: validation val_9: Invalid - login lakeside/[redacted] refused\n']);
      expect(again.stdout).not.toContain('quoted-pass-9');
    } finally {
      await server.close();
    }
  });

  it('asks for a validation already requested by the correlationId it printed, without asking the portal to log in again', async () => {
    const requested = await cli(['setup', 'credentials', 'validate', '--clinic', 'cln_sandbox_main', '--portal', 'deltadentalins'], env);
    expect(requested.code).toBe(0);
    const correlationId = field(requested.stdout, 'correlationId');
    expect(requested.stdout).toContain(`next: \`dental-elig setup credentials validation ${correlationId} --wait\` polls for the outcome`);
    const sentBefore = sandbox.requestLog.filter((r) => r.method === 'POST').length;

    const waited = await cli(['setup', 'credentials', 'validation', correlationId, '--wait'], env);
    expect([waited.code, field(waited.stdout, 'status')]).toEqual([0, 'Valid']);
    const again = await cli(['setup', 'credentials', 'validation', correlationId, '--json'], env);
    expect([again.code, JSON.parse(again.stdout).status]).toEqual([0, 'Valid']);
    expect(sandbox.requestLog.filter((r) => r.method === 'POST').length).toBe(sentBefore);

    // Invalid is a failure, in one line, as validate --wait says it.
    const refused = await cli(['setup', 'credentials', 'validate', '--portal', 'deltadentalins', '--username', 'lakeside'], { ...env, DENTAL_ELIG_PORTAL_PASSWORD: 'expired-pass-2' });
    const invalidId = field(refused.stdout, 'correlationId');
    const invalid = await cli(['setup', 'credentials', 'validation', invalidId, '--wait'], env);
    expect(invalid.code).toBe(1);
    expect(invalid.stderr.split('\n').slice(-2)).toEqual([`dental-elig: validation ${invalidId}: Invalid - The payer portal refused the stored credentials.`, '']);
    expect((await cli(['setup', 'credentials', 'validation', 'val_nope'], env)).stderr).toMatch(/^dental-elig: get credentials validation failed with 404 - /);
  });

  it('ends the validating line before a poll that fails, so the failure is a line of its own', async () => {
    sandbox.injectFault({ method: 'GET', path: /^\/v2\/credentials-validations\//, status: 404 });
    const run = await cli(['setup', 'credentials', 'validate', '--clinic', 'cln_sandbox_main', '--portal', 'deltadentalins', '--wait', '--first-delay-ms', '0'], env);
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^validating credentials \(\S+\)\ndental-elig: get credentials validation failed with 404 - [^\n]+\n$/);
  });

  it('refuses an NPI whose check digit is wrong before sending it', async () => {
    const before = sandbox.requestLog.length;
    const run = await cli(['setup', 'clinic', 'create', '--organization', 'org_1', '--name', 'X', '--npi', '1234567890'], env);
    expect(run).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: create clinic failed (invalid_request) - Request not sent - npi: fails the NPI check digit (a typo?)\n' });
    expect(sandbox.requestLog.length).toBe(before);
  });

  it('names a blank id before sending it, rather than asking another path or listing every registration', async () => {
    const before = sandbox.requestLog.length;
    const runs = [
      [await cli(['setup', 'clinic', 'get', ''], env), 'get clinic failed (invalid_request) - Request not sent - clinicId: must not be blank'],
      [await cli(['setup', 'organization', 'get', ' '], env), 'get organization failed (invalid_request) - Request not sent - organizationId: must not be blank'],
      [await cli(['setup', 'credentials', 'get', '--clinic', '', '--portal', 'deltadentalins'], env), 'get credentials failed (invalid_request) - Request not sent - clinicId: must not be blank'],
      [await cli(['setup', 'registration', 'emails', ''], env), 'list registration emails failed (invalid_request) - Request not sent - correlationId: must not be blank'],
      [await cli(['verify', 'get', ''], env), 'get insurance verification failed (invalid_request) - Request not sent - correlationId: must not be blank'],
    ] as const;
    for (const [run, line] of runs) expect(run).toEqual({ code: 1, stdout: '', stderr: `dental-elig: ${line}\n` });
    expect(sandbox.requestLog.length).toBe(before);
  });

  it('says an unknown clinic once', async () => {
    const run = await cli(['setup', 'clinic', 'get', 'cln_nope'], env);
    expect(run).toEqual({ code: 1, stdout: '', stderr: 'dental-elig: get clinic failed with 422 - Unprocessable Content: clinicId: no clinic has this id\n' });
  });

  it('names the environment variables each command reads in its --help', async () => {
    const help = async (...words: string[]) => (await cli([...words, '--help'], {})).stdout;
    for (const words of [['setup', 'organization', 'create'], ['setup', 'payers', 'sync'], ['verify', 'send'], ['verify', 'get'], ['setup', 'credentials', 'set']]) {
      const text = await help(...words);
      expect(text).toMatch(/^Environment:$/m);
      expect(text).toMatch(/^ {2}DENTAL_ELIG_BASE_URL +the service root/m);
      expect(text).toMatch(/^ {2}DENTAL_ELIG_API_KEY +the API key \(or DENTAL_ELIG_API_KEY_FILE/m);
    }
    expect(await help('setup', 'organization', 'create')).toMatch(/^ {2}DENTAL_ELIG_CUSTOMER_ID +/m);
    expect(await help('setup', 'credentials', 'set')).toMatch(/^ {2}DENTAL_ELIG_PORTAL_PASSWORD +/m);
    expect(await help('setup', 'payers', 'sync')).toMatch(/^ {2}DENTAL_ELIG_CATALOG +/m);
    expect(await help('setup', 'portals', 'list')).not.toContain('DENTAL_ELIG_PORTAL_PASSWORD');
    // serve's --help names every variable README's sync service section names for serve (not on a line that starts the
    // sandbox beside it), and README every one the help lists.
    const serve = await help('serve');
    const readme = readFileSync(path.join(projectRoot, 'README.md'), 'utf8');
    const start = readme.indexOf('## The sync service\n');
    const variables = (text: string) => new Set(text.match(/\bDENTAL_ELIG_[A-Z_]+\b/g));
    const listed = [...serve.matchAll(/^ {2}(DENTAL_ELIG_[A-Z_]+) +\S/gm)].map((m) => m[1] ?? '');
    const forServe = readme
      .slice(start, readme.indexOf('\n## ', start + 1))
      .split('\n')
      .filter((line) => !line.includes('dental-elig sandbox'))
      .join('\n');
    expect([...variables(forServe)].filter((name) => !variables(serve).has(name))).toEqual([]);
    expect(listed.filter((name) => !variables(readme).has(name))).toEqual([]);
    expect(listed.length).toBeGreaterThan(15);
    expect(serve).toContain('DENTAL_ELIG_API_KEY_FILE');
  });

  it('refuses a plain http base URL for another host unless DENTAL_ELIG_ALLOW_INSECURE_HTTP=1', async () => {
    const insecure = { ...env, DENTAL_ELIG_BASE_URL: 'http://verify.example.invalid' };
    const run = await cli(['setup', 'portals', 'list'], insecure);
    expect(run.code).toBe(2);
    expect(run.stderr).toMatch(/^dental-elig: DENTAL_ELIG_BASE_URL: plain http to a host other than this machine would send the API key and patient data unencrypted; use https, or allow it explicitly/);
    const allowed = await cli(['setup', 'portals', 'list'], { ...insecure, DENTAL_ELIG_ALLOW_INSECURE_HTTP: '1' }, '');
    expect(allowed.stderr).not.toContain('unencrypted');
  }, 30_000);

  it('names the URL of a refused connection and warns on each retry', async () => {
    const gone = await startScriptedServer(() => undefined);
    await gone.close();
    const file = path.join(dir, 'fast-retries.json');
    await writeFile(file, JSON.stringify({ maxRetries: 2 }));
    const run = await cli(['--config', file, 'setup', 'organization', 'list'], { ...env, DENTAL_ELIG_BASE_URL: gone.url });
    expect(run.code).toBe(1);
    const lines = run.stderr.trimEnd().split('\n');
    expect(lines).toHaveLength(3);
    expect(lines[0]).toMatch(new RegExp(`^dental-elig: warning: list organizations: GET ${gone.url}/v2/customers/cus_sandbox/organizations connection refused \\(ECONNREFUSED\\); retry 1 of 2 in \\d+\\.\\d s$`));
    expect(lines[2]).toBe(`dental-elig: list organizations failed (ECONNREFUSED) - Connection refused: GET ${gone.url}/v2/customers/cus_sandbox/organizations (after 2 retries)`);
  });

  it('lists the registrations it can read when the service lists one it cannot, with one warning naming where that one failed', async () => {
    const registration = (correlationId: string, registeredEmail: string) => ({ correlationId, portalId: 'deltadentalins', clinicId: 'cl_1', registeredEmail });
    const server = await startScriptedServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ items: [registration('reg_1', 'a@example.test'), registration(' ', 'b@example.test'), registration('reg_3', 'c@example.test')], nextCursor: null }));
    });
    try {
      const run = await cli(['setup', 'registration', 'list', '--json'], { ...env, DENTAL_ELIG_BASE_URL: server.url });
      expect(run.code).toBe(0);
      expect((JSON.parse(run.stdout) as Array<{ correlationId: string }>).map((r) => r.correlationId)).toEqual(['reg_1', 'reg_3']);
      expect(run.stderr).toBe('dental-elig: warning: 1 of the items the service listed could not be read and are left out: items.1.correlationId: must not be blank\n');
    } finally {
      await server.close();
    }
  });

  it('never prints a password the service sends back with the credentials, saying only that one is set', async () => {
    // The interface has GET retrieve the credentials, username and password.
    const server = await startScriptedServer((req, res) => {
      // set looks the portal up first: a network that does not list it leaves the login method Native.
      if (req.url.startsWith('/v2/network/portals')) return json(res, 200, { items: [], nextCursor: null });
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ clinicId: 'cl_1', portalId: 'metdental', username: 'office1', password: 'echoed-pass-9', loginMethod: 'Native' }));
    });
    const at = { ...env, DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_PORTAL_PASSWORD: 'echoed-pass-9' };
    try {
      const runs = [
        await cli(['setup', 'credentials', 'get', '--clinic', 'cl_1', '--portal', 'metdental'], at),
        await cli(['setup', 'credentials', 'get', '--clinic', 'cl_1', '--portal', 'metdental', '--json'], at),
        await cli(['setup', 'credentials', 'set', '--clinic', 'cl_1', '--portal', 'metdental', '--username', 'office1'], at),
        await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--username', 'office1', '--json'], at),
      ];
      for (const run of runs) {
        expect(run.code).toBe(0);
        expect(run.stdout + run.stderr).not.toContain('echoed-pass-9');
      }
      expect(field(runs[0]?.stdout ?? '', 'passwordSet')).toBe('true');
      expect(JSON.parse(runs[1]?.stdout ?? '')).toEqual({ clinicId: 'cl_1', portalId: 'metdental', username: 'office1', passwordSet: true, loginMethod: 'Native' });
    } finally {
      await server.close();
    }
  });

  it('takes credentials the service stored as stored, whatever else its answer holds: the interface shows no record in it', async () => {
    const server = await startScriptedServer((req, res) => {
      if (req.url.startsWith('/v2/network/portals')) return json(res, 200, { items: [], nextCursor: null });
      json(res, req.method === 'POST' ? 201 : 200, { clinicId: 'cl_1', portalId: 'metdental', status: 'Stored' });
    });
    const at = { ...env, DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_PORTAL_PASSWORD: 'portal-pass-5' };
    try {
      const set = await cli(['setup', 'credentials', 'set', '--clinic', 'cl_1', '--portal', 'metdental', '--username', 'office1', '--json'], at);
      expect([set.code, set.stderr]).toEqual([0, '']);
      expect(JSON.parse(set.stdout)).toEqual({ clinicId: 'cl_1', portalId: 'metdental', status: 'Stored' });
      const update = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--password-env'], at);
      expect([update.code, update.stderr, field(update.stdout, 'status')]).toEqual([0, '', 'Stored']);
    } finally {
      await server.close();
    }
  });

  it('changes a stored password on update only when asked: a password exported for another portal is left unused, and said so', async () => {
    const server = await startScriptedServer((_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ clinicId: 'cl_1', portalId: 'metdental', username: 'office1', loginMethod: 'Native' }));
    });
    const at = { ...env, DENTAL_ELIG_BASE_URL: server.url, DENTAL_ELIG_PORTAL_PASSWORD: 'exported-for-another-7' };
    try {
      const phone = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--mfa-phone', '+15555550123'], at);
      expect(phone.code).toBe(0);
      expect(phone.stderr).toContain('warning: DENTAL_ELIG_PORTAL_PASSWORD is set and left unused: update changes the password only with --password-env or --password-stdin');
      const asked = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--password-env'], at);
      expect(asked.code).toBe(0);
      expect(asked.stderr).toBe('');
      expect(server.requests.map((r) => [r.method, JSON.parse(r.body) as unknown])).toEqual([
        ['PATCH', { mfaPhoneNumber: '+15555550123' }],
        ['PATCH', { password: 'exported-for-another-7' }],
      ]);
      const both = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--password-env', '--password-stdin'], at, 'from-stdin\n');
      expect([both.code, both.stderr.trim()]).toEqual([2, 'dental-elig: update: give --password-env or --password-stdin, not both']);
      const unset = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--password-env'], { ...at, DENTAL_ELIG_PORTAL_PASSWORD: '' });
      expect([unset.code, unset.stderr.trim()]).toEqual([2, 'dental-elig: password: set DENTAL_ELIG_PORTAL_PASSWORD or use --password-stdin']);
      // Refusing --password, update names the way it takes the environment's: the variable alone changes nothing.
      const argv = await cli(['setup', 'credentials', 'update', '--clinic', 'cl_1', '--portal', 'metdental', '--password', 'x'], at);
      expect([argv.code, argv.stderr.trim()]).toEqual([2, 'dental-elig: --password: passwords are not taken on the command line; set DENTAL_ELIG_PORTAL_PASSWORD with --password-env or use --password-stdin']);
    } finally {
      await server.close();
    }
  });

  it('keeps a service answer with line breaks and terminal escapes to one plain line, and its records free of escapes', async () => {
    const server = await startScriptedServer((req, res) => {
      if (req.url.startsWith('/v2/organizations')) {
        res.writeHead(422, { 'content-type': 'application/problem+json' });
        res.end(JSON.stringify({ title: 'Bad\nname', detail: 'first\r\n\u001b[2J\u001b[31mcleared\u009b0m', errors: [{ field: 'name', message: 'too\u2028long', code: 'invalid_value' }] }));
        return;
      }
      res.writeHead(req.method === 'POST' ? 201 : 200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ correlationId: 'val_1', status: 'Invalid\u001b[2J', result: { title: 'Invalid credentials', detail: 'portal said\nno' } }));
    });
    const at = { ...env, DENTAL_ELIG_BASE_URL: server.url };
    try {
      const created = await cli(['setup', 'organization', 'create', '--name', 'Lakeside'], at);
      expect(created.code).toBe(1);
      expect(created.stderr).toBe('dental-elig: create organization failed with 422 - Bad name: first [2J [31mcleared 0m - name: too long\n');
      const validated = await cli(['setup', 'credentials', 'validate', '--clinic', 'cl_1', '--portal', 'metdental', '--wait', '--first-delay-ms', '0'], at);
      expect(validated.code).toBe(1);
      expect(validated.stdout + validated.stderr).not.toMatch(/[\u001b\u009b]/);
      expect(validated.stderr.split('\n').slice(1)).toEqual(['dental-elig: validation val_1: Invalid [2J - portal said no', '']);
    } finally {
      await server.close();
    }
  });

  it('says how long the service asked to be left alone when it refuses with Retry-After', async () => {
    // A create is never repeated, and a wait longer than the client's longest retry is not waited out.
    const server = await startScriptedServer((_req, res) => {
      res.writeHead(429, { 'content-type': 'application/problem+json', 'retry-after': '120' });
      res.end(JSON.stringify({ title: 'Too Many Requests', status: 429 }));
    });
    try {
      const created = await cli(['setup', 'organization', 'create', '--name', 'Lakeside'], { ...env, DENTAL_ELIG_BASE_URL: server.url });
      expect(created.code).toBe(1);
      expect(created.stderr).toBe('dental-elig: create organization failed with 429 - Too Many Requests (the service asks for 120 s before another try)\n');
      const listed = await cli(['setup', 'organization', 'list'], { ...env, DENTAL_ELIG_BASE_URL: server.url });
      expect(listed.stderr).toBe('dental-elig: list organizations failed with 429 - Too Many Requests (the service asks for 120 s before another try)\n');
      expect(server.requests).toHaveLength(2);
    } finally {
      await server.close();
    }
  });

  it('turns a 401 into one line', async () => {
    const run = await cli(['setup', 'portals', 'list'], { ...env, DENTAL_ELIG_API_KEY: 'sk_wrong' });
    expect(run.code).toBe(1);
    expect(run.stderr).toMatch(/^dental-elig: list portal network failed with 401 - [^\n]+\n$/);
  });
});
