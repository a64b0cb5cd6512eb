"""The config layer: every key a user types is declared, checked and refused in one sentence before any work.

What it guarantees: :mod:`~decpriv.config.types` declares what each plugin's keys accept (ranges,
choices) on the plugin's own signature; :mod:`~decpriv.config.declarations` records those declarations
so a bad value is refused before torch loads; :mod:`~decpriv.config.validation` checks a composed config
against them (exit status 2, the key, the value and the fix); :mod:`~decpriv.config.user_conf` reads the
user's ./conf and refuses a file that shadows a built-in.

What crosses its border: a composed Hydra config in, a :class:`~decpriv.errors.ConfigError` or nothing
out. It builds nothing and imports a plugin only where no declaration is recorded.
"""
