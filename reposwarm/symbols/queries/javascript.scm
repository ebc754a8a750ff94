; JavaScript's own, after ecma.scm

; Definitions
(class_declaration
  name: (identifier) @name.definition.class) @definition.class

(field_definition
  property: [(property_identifier) (private_property_identifier)] @name.definition.field) @definition.field

(assignment_expression
  left: (member_expression
    property: (property_identifier) @name.definition.function)
  right: [(arrow_function) (function_expression)]) @definition.function

(program
  (variable_declaration
    (variable_declarator
      name: (identifier) @name.definition.variable) @definition.variable))

; References
(class_heritage
  (identifier) @name.reference.class)
