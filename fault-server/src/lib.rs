//! The fault-server: scripted faults, a finite-capacity model and a ledger of the truth.
