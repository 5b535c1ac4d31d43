"""The pieces compare_setups is built from: what one setup is, and how each kind of difference is found.

configs: YAML / JSON / TOML flattened to dotted keys; locks: lock and requirements files to
package versions; launcher: torchrun / accelerate / deepspeed / srun invocations in commands
and shell scripts; codediff: git hunks between two trees; sides: a side's files, env and command.
"""
