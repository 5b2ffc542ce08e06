/**
 * A setting that cannot be used: the config file, an environment variable, or a file in
 * mappings/. The message names it and never repeats a secret. The CLI answers it with one line
 * and exit code 2 whichever command met it (runCli).
 */
export class ConfigError extends Error {}
