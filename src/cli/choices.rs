//! The command line's view of the ground floor's named choices: clap value lists built from
//! `protocol::Choice`, so `--mode`, `--approval`, `--sandbox`, `--device`, `--reasoning`,
//! `--route-constraint` and `--speculate` accept exactly the names config files do.

use clap::builder::PossibleValue;

use crate::protocol::{
    ApprovalPolicy, Choice, DeviceChoice, Mode, ReasoningEffort, RouteConstraint, SandboxMode,
    Speculate,
};

macro_rules! value_enum_by_choice {
    ($($t:ty),*) => {$(
        impl clap::ValueEnum for $t {
            fn value_variants<'a>() -> &'a [Self] {
                <$t as Choice>::ALL
            }
            fn to_possible_value(&self) -> Option<PossibleValue> {
                let value = PossibleValue::new(Choice::name(*self));
                let help = Choice::help(*self);
                Some(if help.is_empty() { value } else { value.help(help) })
            }
        }
    )*};
}

value_enum_by_choice!(
    crate::eval::isolation::IsolationChoice,
    Mode,
    ApprovalPolicy,
    SandboxMode,
    DeviceChoice,
    RouteConstraint,
    Speculate,
    ReasoningEffort
);

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    #[test]
    fn flags_accept_the_config_spellings() {
        for p in ApprovalPolicy::ALL {
            assert_eq!(ApprovalPolicy::from_str(p.name(), false), Ok(*p));
        }
        assert_eq!(Mode::from_str("proxy", false), Ok(Mode::Proxy));
        assert!(SandboxMode::from_str("banana", false).is_err());
    }
}
