"""What every part uses: user errors, config-field domains, atomic writes, figures, the hub switch, safe loading."""
