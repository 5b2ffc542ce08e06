import { Option, type Command } from 'commander';
import type { VerificationClient } from '../../verification/client';
import { validationKindOf } from '../../verification/outcome';
import { LoginMethod, type CredentialsPatch, type CredentialsValidation, type CredentialsValidationRequest } from '../../verification/wire';
import { CliError, listAll, progressLine, say, waitOptions, type CliIo } from '../io';
import { withService } from '../service-context';
import { printRecord } from '../table';

interface PasswordOptions {
  passwordStdin?: boolean;
  passwordEnv?: boolean;
  password?: string;
}

/**
 * Portal passwords come from the environment or stdin: argv is visible to every process and kept
 * in shell history. `fromEnv` false: the environment's is taken only when --password-env asks.
 */
async function readPassword(io: CliIo, opts: PasswordOptions, required: boolean, fromEnv = true): Promise<string | undefined> {
  if (opts.password !== undefined) {
    // update takes the environment's only with --password-env: telling it to set the variable alone would change nothing.
    const env = fromEnv ? 'set DENTAL_ELIG_PORTAL_PASSWORD' : 'set DENTAL_ELIG_PORTAL_PASSWORD with --password-env';
    throw new CliError(`--password: passwords are not taken on the command line; ${env} or use --password-stdin`, 2);
  }
  if (opts.passwordStdin) {
    let text = '';
    for await (const chunk of io.stdin) text += String(chunk);
    const password = text.split(/\r?\n/)[0] ?? '';
    if (!password) throw new CliError('--password-stdin: standard input held no password', 2);
    return password;
  }
  const inEnv = fromEnv || opts.passwordEnv ? io.env.DENTAL_ELIG_PORTAL_PASSWORD : undefined;
  if (inEnv) return inEnv;
  if (required || opts.passwordEnv) throw new CliError('password: set DENTAL_ELIG_PORTAL_PASSWORD or use --password-stdin', 2);
  return undefined;
}

function credentialOptions(cmd: Command): Command {
  return cmd
    .requiredOption('--clinic <clinicId>', 'clinic id')
    .requiredOption('--portal <portalId>', 'portal id')
    .option('--password-stdin', 'read the portal password from the first line of standard input')
    .addOption(new Option('--password <value>').hideHelp())
    .option('--login-method <method>', 'Native or SSO (default: the one the portal takes, Native when it takes both)')
    .option('--mfa-email <email>', 'the registeredEmail, for TwoFactorEmail portals')
    .option('--mfa-phone <e164>', 'the registeredPhoneNumber, for TwoFactorSms portals')
    .option('--json', 'print JSON');
}

interface CredentialOpts extends PasswordOptions {
  clinic: string;
  portal: string;
  username?: string;
  loginMethod?: string;
  mfaEmail?: string;
  mfaPhone?: string;
  json?: boolean;
}

function loginMethod(value: string | undefined): LoginMethod | undefined {
  if (value === undefined) return undefined;
  const parsed = LoginMethod.safeParse(value);
  if (!parsed.success) throw new CliError(`--login-method: must be Native or SSO`, 2);
  return parsed.data;
}

/**
 * The login method to store, checked against what the portal network says the portal takes. The
 * service stores credentials it would not log in with (a Native login for an SSO portal, no MFA
 * contact for a portal that sends codes), and a validation of them may still say Valid; only each
 * verification then is refused, with a 422. A portal the network does not list is the service's to refuse.
 * `whole` false: an update, whose MFA contacts not given are the ones already stored.
 */
async function portalLoginMethod(io: CliIo, client: VerificationClient, opts: CredentialOpts, whole = true): Promise<LoginMethod> {
  const given = loginMethod(opts.loginMethod);
  const portal = (await listAll(io, client, (page) => client.listPortals(page))).find((p) => p.portalId === opts.portal);
  const takes = (portal?.loginMethods ?? []).flatMap((m) => (LoginMethod.safeParse(m).success ? [m as LoginMethod] : []));
  if (given && takes.length > 0 && !takes.includes(given)) throw new CliError(`--login-method: portal ${opts.portal} takes ${takes.join(' or ')}, not ${given}`, 2);
  const needs = (method: string) => whole && portal?.requiresAuthentication !== false && (portal?.authenticationMethods ?? []).includes(method);
  const missing = (option: string, by: string, method: string, field: string) =>
    new CliError(`${option}: required: portal ${opts.portal} sends its login codes by ${by} (${method}); give its registration's ${field} (setup registration list)`, 2);
  if (needs('TwoFactorEmail') && !opts.mfaEmail) throw missing('--mfa-email', 'email', 'TwoFactorEmail', 'registeredEmail');
  if (needs('TwoFactorSms') && !opts.mfaPhone) throw missing('--mfa-phone', 'SMS', 'TwoFactorSms', 'registeredPhoneNumber');
  return given ?? (takes.length === 0 || takes.includes('Native') ? 'Native' : (takes[0] as LoginMethod));
}

export function registerCredentials(setup: Command, io: CliIo): void {
  const creds = setup.command('credentials').description('Payer portal credentials, stored per clinic and portal');

  credentialOptions(creds.command('set').description('Store the portal credentials for a clinic'))
    .requiredOption('--username <username>', 'portal username')
    .action(async (opts: CredentialOpts, cmd: Command) => {
      const password = (await readPassword(io, opts, true)) as string;
      await withService(io, cmd, async (client) => {
        const record = await client.createCredentials(opts.clinic, opts.portal, {
          username: opts.username as string,
          password,
          loginMethod: await portalLoginMethod(io, client, opts),
          ...(opts.mfaEmail ? { mfaEmail: opts.mfaEmail } : {}),
          ...(opts.mfaPhone ? { mfaPhoneNumber: opts.mfaPhone } : {}),
        });
        printRecord(io, record ?? { clinicId: opts.clinic, portalId: opts.portal, stored: true }, Boolean(opts.json));
      });
    });

  credentialOptions(creds.command('update').description('Change stored credentials (only the fields given; the password only with --password-env or --password-stdin)'))
    .option('--username <username>', 'portal username')
    .option('--password-env', 'change the password to DENTAL_ELIG_PORTAL_PASSWORD')
    .action(async (opts: CredentialOpts, cmd: Command) => {
      if (opts.passwordEnv && opts.passwordStdin) throw new CliError('update: give --password-env or --password-stdin, not both', 2);
      // Only when asked: a password exported for another portal's `set` would otherwise replace this one's silently.
      const password = await readPassword(io, opts, false, false);
      if (!password && io.env.DENTAL_ELIG_PORTAL_PASSWORD) say(io, 'warning: DENTAL_ELIG_PORTAL_PASSWORD is set and left unused: update changes the password only with --password-env or --password-stdin');
      const patch: CredentialsPatch = {
        ...(opts.username ? { username: opts.username } : {}),
        ...(password ? { password } : {}),
        ...(opts.loginMethod ? { loginMethod: loginMethod(opts.loginMethod) } : {}),
        ...(opts.mfaEmail ? { mfaEmail: opts.mfaEmail } : {}),
        ...(opts.mfaPhone ? { mfaPhoneNumber: opts.mfaPhone } : {}),
      };
      if (Object.keys(patch).length === 0) throw new CliError('update: give at least one of --username, a password, --login-method, --mfa-email, --mfa-phone', 2);
      await withService(io, cmd, async (client) => {
        if (patch.loginMethod) await portalLoginMethod(io, client, opts, false);
        const result = await client.updateCredentials(opts.clinic, opts.portal, patch);
        if (!result.changed) io.stdout.write('unchanged: the stored credentials already had these values\n');
        else printRecord(io, result.record ?? { clinicId: opts.clinic, portalId: opts.portal, updated: true }, Boolean(opts.json));
      });
    });

  creds
    .command('get')
    .description('Show the stored credentials (never the password)')
    .requiredOption('--clinic <clinicId>', 'clinic id')
    .requiredOption('--portal <portalId>', 'portal id')
    .option('--json', 'print JSON')
    .action(async (opts: { clinic: string; portal: string; json?: boolean }, cmd: Command) =>
      withService(io, cmd, async (client) => printRecord(io, await client.getCredentials(opts.clinic, opts.portal), Boolean(opts.json))),
    );

  waitOptions(
    creds
      .command('validate')
      .description('Ask the service to log in to the portal: with the credentials stored for a clinic (--clinic), or with a username and password before they are stored (--username), as the service recommends')
      .option('--clinic <clinicId>', 'clinic id: validate the credentials stored for it')
      .requiredOption('--portal <portalId>', 'portal id')
      .option('--username <username>', 'portal username: validate these credentials, not stored ones (the password as for set)')
      .option('--password-stdin', 'with --username: read the portal password from the first line of standard input')
      .addOption(new Option('--password <value>').hideHelp())
      .option('--wait', 'poll until the validation finishes (first poll after 3 s)'),
    3000,
  )
    .option('--json', 'print JSON')
    .action(async (opts: PasswordOptions & { clinic?: string; portal: string; username?: string; wait?: boolean; firstDelayMs: number; timeoutMs: number; json?: boolean }, cmd: Command) => {
      if ((opts.clinic === undefined) === (opts.username === undefined)) {
        throw new CliError('validate: give --clinic (the credentials stored for it) or --username (credentials not stored yet), one of them', 2);
      }
      if (opts.clinic !== undefined && (opts.passwordStdin || opts.password !== undefined)) {
        throw new CliError('--clinic: validates the stored password; a password goes with --username', 2);
      }
      const request: CredentialsValidationRequest =
        opts.username === undefined
          ? { clinicId: opts.clinic as string, portalId: opts.portal }
          : { portalId: opts.portal, credentials: { username: opts.username, password: (await readPassword(io, opts, true)) as string } };
      // Polled, the validation's result may quote the password it tried: the client cuts it out of those answers too.
      const secrets = 'credentials' in request ? [request.credentials.password] : [];
      await withService(io, cmd, async (client) => {
        const requested = await client.requestCredentialsValidation(request);
        if (opts.wait) return showValidation(io, client, requested.correlationId, opts);
        printRecord(io, requested, Boolean(opts.json));
        // This correlationId is the validation's own; `registration emails` takes the registration's.
        if (!opts.json) {
          io.stdout.write(`next: \`dental-elig setup credentials validation ${requested.correlationId} --wait\` polls for the outcome; this id is the validation's, not the registration's\n`);
        }
      }, { secrets });
    });

  waitOptions(
    creds
      .command('validation <correlationId>')
      .description('Show a credentials validation by the correlationId `credentials validate` printed, without asking the portal to log in again; Pending means ask again later, or --wait')
      .option('--wait', 'poll until the validation finishes'),
    0,
  )
    .option('--json', 'print JSON')
    .action(async (correlationId: string, opts: WaitOpts & { wait?: boolean }, cmd: Command) => {
      // The result may quote the password tried, which this command was not given: the one exported for validate is cut out.
      const exported = io.env.DENTAL_ELIG_PORTAL_PASSWORD;
      await withService(io, cmd, async (client) => {
        if (opts.wait) return showValidation(io, client, correlationId, opts);
        const current = await client.getCredentialsValidation(correlationId);
        printRecord(io, current, Boolean(opts.json));
        failUnlessValid(current, undefined);
      }, { secrets: exported ? [exported] : [] });
    });
}

interface WaitOpts {
  firstDelayMs: number;
  timeoutMs: number;
  json?: boolean;
}

/** Polls a validation to its end and prints it; anything but Valid is a failure, in one line. */
async function showValidation(io: CliIo, client: VerificationClient, correlationId: string, opts: WaitOpts): Promise<void> {
  const final = await progressLine(io, `validating credentials (${correlationId})`, (add) =>
    client.waitForCredentialsValidation(correlationId, {
      firstDelayMs: opts.firstDelayMs,
      timeoutMs: opts.timeoutMs,
      onPoll: (status, elapsed) => add(`${status} ${Math.round(elapsed / 1000)}s`),
    }),
  );
  printRecord(io, final, Boolean(opts.json));
  failUnlessValid(final, opts.timeoutMs);
}

/** `waitedMs` undefined: a Pending looked at once, not waited for, is no failure. */
function failUnlessValid(validation: CredentialsValidation, waitedMs: number | undefined): void {
  const kind = validationKindOf(validation.status);
  if (kind === 'pending') {
    if (waitedMs !== undefined) throw new CliError(`validation ${validation.correlationId}: still Pending after ${waitedMs} ms`);
    return;
  }
  if (kind !== 'valid') throw new CliError(`validation ${validation.correlationId}: ${validation.status}${validation.result?.detail ? ` - ${validation.result.detail}` : ''}`);
}
