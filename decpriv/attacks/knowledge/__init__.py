"""Knowledge-matrix reconstruction attacks on gossip averaging and D-GD (El Mrini, Cyffers & Bellet, ICML 2024)."""
