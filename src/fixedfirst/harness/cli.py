"""`fixedfirst-lm-eval`: lm-evaluation-harness's own command line, with `--model fixedfirst` known.

The stock `lm_eval` command of lm-eval 0.4.13 looks models up in its built-in registry only (see
fixedfirst.harness); this command registers ours and hands every argument to the harness:

    fixedfirst-lm-eval run --model fixedfirst --model_args run=RUN,depth=8 --tasks piqa
"""

from __future__ import annotations

import sys


def main() -> None:
    from fixedfirst.errors import UserError
    from fixedfirst.harness import register

    try:
        register()
    except UserError as e:
        print(f"fixedfirst-lm-eval: error: {e}", file=sys.stderr)
        sys.exit(2)
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()


if __name__ == "__main__":
    main()
